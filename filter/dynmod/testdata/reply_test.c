// reply_test drives a local reply's C half as Envoy would, over fake
// callbacks: the request body read out of Envoy's buffers (reply.c) in
// parts, the reply's status, headers and body as Envoy receives them, and
// the body and trailers hooks of hooks.c, which hand a stream's body to Go
// only while it awaits it. TestReplyInC (dynmod_test.go) builds it with
// AddressSanitizer and UndefinedBehaviorSanitizer and runs it: exit status
// 0 and "ok" when every check held, else each failed check on standard
// output.

#include "../hooks.c"
#include "../reply.c"
#include "../wcache.c"
#include "../wserve.c"

#include <stdio.h>

#include "fakes.h"

// The fake Envoy's request body: the part the current body hook received
// and the buffered body, each in chunks; whether the received part is the
// buffered body (a filter before buffered it all); whether get_body_chunks
// fails.
static allot_buffer received[24], buffered[24];
static size_t n_received, n_buffered;
static bool received_is_buffered, chunks_fail;
static int chunk_reads;

size_t envoy_dynamic_module_callback_http_get_body_chunks_size(uintptr_t f, int32_t type) {
  return type == ALLOT_BODY_RECEIVED_REQUEST ? n_received : type == ALLOT_BODY_BUFFERED_REQUEST ? n_buffered : 0;
}

bool envoy_dynamic_module_callback_http_get_body_chunks(uintptr_t f, int32_t type, allot_buffer* out) {
  chunk_reads++;
  if (chunks_fail) return false;
  const allot_buffer* from = type == ALLOT_BODY_RECEIVED_REQUEST ? received : buffered;
  size_t n = type == ALLOT_BODY_RECEIVED_REQUEST ? n_received : n_buffered;
  memcpy(out, from, n * sizeof(allot_buffer));
  return true;
}

bool envoy_dynamic_module_callback_http_received_buffered_request_body(uintptr_t f) { return received_is_buffered; }

// The reply Envoy received: its status, its headers as "name: value\n"
// lines, its body, its details' length, and how many were sent.
static uint32_t sent_status;
static char sent_headers[1024], sent_body[256];
static size_t sent_details;
static int sent;

void envoy_dynamic_module_callback_http_send_response(uintptr_t f, uint32_t status, allot_header* h, size_t n,
                                                      allot_buffer body, allot_buffer details) {
  sent++;
  sent_status = status;
  sent_headers[0] = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(sent_headers);
    snprintf(sent_headers + l, sizeof sent_headers - l, "%.*s: %.*s\n", (int)h[i].key_length, h[i].key_ptr,
             (int)h[i].value_length, h[i].value_ptr);
  }
  snprintf(sent_body, sizeof sent_body, "%.*s", (int)body.length, body.ptr != NULL ? body.ptr : "");
  sent_details = details.length;
}

static allot_buffer B(const char* s) { return (allot_buffer){s, strlen(s)}; }

static void reset_body(void) {
  n_received = n_buffered = 0;
  received_is_buffered = chunks_fail = false;
  chunk_reads = 0;
}

static void check_body(void) {
  const uintptr_t f = 0xf17e;
  char out[64];

  // No body at all: 0, nothing read.
  reset_body();
  CHECK(allot_request_body(f, out, sizeof out) == 0 && chunk_reads == 0, "no body: not 0, or chunks read");

  // A body in parts: the buffered parts, then the received one.
  reset_body();
  buffered[0] = B("{\"con");
  buffered[1] = B("text\":");
  received[0] = B("{}}");
  n_buffered = 2, n_received = 1;
  size_t n = allot_request_body(f, out, sizeof out);
  CHECK(n == 14 && memcmp(out, "{\"context\":{}}", 14) == 0, "parts: got %zu %.*s", n, (int)(n < 64 ? n : 0), out);

  // Too small a buffer: the length, nothing copied.
  memset(out, 'x', sizeof out);
  CHECK(allot_request_body(f, out, 5) == 14 && out[0] == 'x', "small buffer: copied, or not the length");

  // The received part is the buffered body (a filter before buffered it):
  // counted once.
  reset_body();
  buffered[0] = B("{}");
  received[0] = buffered[0];
  n_buffered = n_received = 1;
  received_is_buffered = true;
  n = allot_request_body(f, out, sizeof out);
  CHECK(n == 2 && memcmp(out, "{}", 2) == 0, "received is buffered: got %zu", n);

  // More chunks than the stack holds: read through a malloc'd vector.
  reset_body();
  static const char digits[] = "abcdefghijklmnopqrstuvwx";
  for (size_t i = 0; i < 24; i++) buffered[i] = (allot_buffer){digits + i, 1};
  n_buffered = 24;
  n = allot_request_body(f, out, sizeof out);
  CHECK(n == 24 && memcmp(out, digits, 24) == 0, "24 chunks: got %zu", n);

  // Envoy gives no chunks: an error, never a short body.
  chunks_fail = true;
  CHECK(allot_request_body(f, out, sizeof out) == ALLOT_BODY_ERROR, "chunks refused: not ALLOT_BODY_ERROR");
}

static void check_send(void) {
  const uintptr_t f = 0xf17e;
  // Two headers back to back, as HeaderBatch lays them out.
  const char data[] = "content-typeapplication/jsonetag\"v7\"";
  const uint32_t lens[] = {12, 16, 4, 4};
  const char body[] = "{\"flags\":[]}";
  sent = 0;
  CHECK(allot_send_response(f, 200, data, lens, 2, body, strlen(body)), "send refused");
  CHECK(sent == 1 && sent_status == 200, "sent %d, status %u", sent, sent_status);
  CHECK(strcmp(sent_headers, "content-type: application/json\netag: \"v7\"\n") == 0, "headers %s", sent_headers);
  CHECK(strcmp(sent_body, body) == 0 && sent_details == 0, "body %s, details %zu", sent_body, sent_details);

  // No headers, no body: a bare status.
  CHECK(allot_send_response(f, 304, NULL, NULL, 0, NULL, 0), "bare 304 refused");
  CHECK(sent == 2 && sent_status == 304 && sent_headers[0] == 0 && sent_body[0] == 0, "bare 304 not as sent");

  // Over the bound: refused, nothing sent.
  uint32_t many[2 * (ALLOT_REPLY_MAX_HEADERS + 1)];
  memset(many, 0, sizeof many);
  CHECK(!allot_send_response(f, 200, "", many, ALLOT_REPLY_MAX_HEADERS + 1, NULL, 0), "too many headers sent");
  CHECK(sent == 2, "a reply over the bound reached Envoy");
}

static void check_hooks(void) {
  const uintptr_t f = 0xf17e;
  reset_stats();
  go_body_calls = 0;

  // An odd handle has no state: its body never reaches Go, and it cannot
  // await one.
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, 3, true) == ALLOT_BODY_CONTINUE, "odd: not continue");
  CHECK(envoy_dynamic_module_on_http_filter_request_trailers(f, 3) == ALLOT_TRAILERS_CONTINUE, "odd trailers");
  CHECK(!allot_stream_await_body(3) && !allot_stream_await_body(0), "await_body on no state");
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, 0, true) == ALLOT_BODY_CONTINUE, "0: not continue");
  CHECK(go_body_calls == 0, "a stateless stream's body reached Go");

  // A stream that does not await its body: continue, no Go.
  uintptr_t m = envoy_dynamic_module_on_http_filter_new(8, f);
  CHECK(m != 0 && !(m & 1), "even handle: no state");
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, m, false) == ALLOT_BODY_CONTINUE, "not awaiting");
  CHECK(go_body_calls == 0, "a body not awaited reached Go");

  // Awaiting: each part goes to Go, buffered while Go wants more...
  CHECK(allot_stream_await_body(m), "await_body refused");
  go_body_status = ALLOT_BODY_STOP_AND_BUFFER;
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, m, false) == ALLOT_BODY_STOP_AND_BUFFER, "part 1");
  CHECK(go_body_calls == 1 && !go_body_eos, "part 1: %d calls", go_body_calls);
  // ...until Go answered: the stream stops, and no later part reaches Go.
  go_body_status = ALLOT_BODY_STOP_NO_BUFFER;
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, m, true) == ALLOT_BODY_STOP_NO_BUFFER, "last part");
  CHECK(go_body_calls == 2 && go_body_eos, "last part: %d calls", go_body_calls);
  CHECK(envoy_dynamic_module_on_http_filter_request_body(f, m, true) == ALLOT_BODY_CONTINUE, "after the answer");
  CHECK(go_body_calls == 2, "a part after the answer reached Go");

  // Trailers end a body still awaited: Go gets its end, and the trailers
  // stop unless Go continues.
  allot_stream_await_body(m);
  go_body_status = ALLOT_BODY_STOP_AND_BUFFER;
  envoy_dynamic_module_on_http_filter_request_body(f, m, false);
  go_body_status = ALLOT_BODY_STOP_NO_BUFFER;
  CHECK(envoy_dynamic_module_on_http_filter_request_trailers(f, m) == ALLOT_TRAILERS_STOP_ITERATION, "trailers");
  CHECK(go_body_calls == 4 && go_body_eos, "trailers: %d calls", go_body_calls);
  CHECK(envoy_dynamic_module_on_http_filter_request_trailers(f, m) == ALLOT_TRAILERS_CONTINUE, "trailers again");
  allot_stream_await_body(m);
  go_body_status = ALLOT_BODY_CONTINUE;
  CHECK(envoy_dynamic_module_on_http_filter_request_trailers(f, m) == ALLOT_TRAILERS_CONTINUE, "trailers, continue");
  CHECK(go_body_calls == 5, "trailers, continue: %d calls", go_body_calls);
  envoy_dynamic_module_on_http_filter_destroy(m);
}

int main(void) {
  check_body();
  check_send();
  check_hooks();
  if (failures > 0) return 1;
  printf("ok\n");
  return 0;
}
