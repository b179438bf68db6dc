// hooks_test drives the stream hooks of hooks.c as Envoy calls them, over
// fake callbacks that record what the module asks of Envoy: the C half of
// the native module's outcome counting (and the sticky cookie's response
// header), with no Go in between. TestStreamHooksInC (dynmod_test.go)
// builds it with AddressSanitizer, which also fails it on a leak, and runs
// it: exit status 0 and "ok" when every check held, else each failed check
// on standard output.

#include "../hooks.c"
#include "../wcache.c"
#include "../wserve.c"

#include <stdio.h>

#include "fakes.h"

// The fake Envoy's state: the response's :status (NULL: no such header),
// the response headers added (the stats: fakes.h).
static const char* status;
static int added;

bool envoy_dynamic_module_callback_http_get_header(uintptr_t filter, int32_t type, allot_buffer key,
                                                   allot_buffer* result, size_t index, size_t* n) {
  if (type != 2 || key.length != 7 || memcmp(key.ptr, ":status", 7) != 0 || status == NULL) return false;
  result->ptr = status;
  result->length = strlen(status);
  return true;
}

bool envoy_dynamic_module_callback_http_add_header(uintptr_t filter, int32_t type, allot_buffer key,
                                                   allot_buffer value) {
  added++;
  return true;
}

static void reset_fake(void) {
  reset_stats();
  added = 0;
}

static uint64_t sum(const uint64_t* v) {
  uint64_t n = 0;
  for (int i = 0; i < 64; i++) n += v[i];
  return n;
}

// ids of two observed variations: counters 0–5 and histogram 6; counters
// 10–15 and histogram 16.
static const size_t two[] = {0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16};

int main(void) {
  const uintptr_t filter = 0xf17e, envoy_config = 0xc0f1;

  // An odd handle: no state, the response and destroy hooks touch nothing.
  reset_fake();
  CHECK(envoy_dynamic_module_on_http_filter_new(3, filter) == 3, "odd handle: module value is not the handle");
  envoy_dynamic_module_on_http_filter_response_headers(filter, 3, true);
  envoy_dynamic_module_on_http_filter_destroy(3);
  CHECK(sum(counters) + sum(config_counters) == 0 && added == 0, "odd handle: a callback was made");

  // A response: each observed variation counts its class once and gets one
  // latency sample, in milliseconds since the request.
  reset_fake();
  uintptr_t s = envoy_dynamic_module_on_http_filter_new(4, filter);
  CHECK(s != 0 && (s & 1) == 0, "even handle: no stream state");
  CHECK(allot_stream_observe(s, envoy_config, two, 2), "observe refused");
  ((allot_stream*)s)->start_ns -= 42 * 1000000;  // the request came 42 ms ago
  status = "503";
  envoy_dynamic_module_on_http_filter_response_headers(filter, s, false);
  envoy_dynamic_module_on_http_filter_response_headers(filter, s, true);  // a second call counts nothing
  envoy_dynamic_module_on_http_filter_destroy(s);
  CHECK(counters[3] == 1 && counters[13] == 1 && sum(counters) == 2, "503: 5xx counters %llu, %llu of %llu",
        (unsigned long long)counters[3], (unsigned long long)counters[13], (unsigned long long)sum(counters));
  CHECK(nsamples[6] == 1 && nsamples[16] == 1, "503: %zu and %zu latency samples, want 1 each", nsamples[6],
        nsamples[16]);
  CHECK(samples[6][0] >= 42 && samples[6][0] < 1000, "latency %llu ms, want 42 or a little more",
        (unsigned long long)samples[6][0]);
  CHECK(sum(config_counters) == 0, "a stream with a response counted a reset");

  // Classes by :status; none, or a malformed one, is other.
  const struct {
    const char* status;
    int counter;
  } classes[] = {{"200", 0}, {"302", 1}, {"404", 2}, {"599", 3}, {"101", 4}, {"600", 4}, {"2x0", 4}, {"20", 4}, {NULL, 4}};
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
    reset_fake();
    s = envoy_dynamic_module_on_http_filter_new(4, filter);
    allot_stream_observe(s, envoy_config, two, 1);
    status = classes[i].status;
    envoy_dynamic_module_on_http_filter_response_headers(filter, s, true);
    envoy_dynamic_module_on_http_filter_destroy(s);
    CHECK(counters[classes[i].counter] == 1 && sum(counters) == 1, "status %s: not counted in class %d alone",
          classes[i].status ? classes[i].status : "(none)", classes[i].counter);
  }

  // A stream destroyed without response headers counts a reset on the
  // configuration's counters, and records no latency.
  reset_fake();
  s = envoy_dynamic_module_on_http_filter_new(4, filter);
  allot_stream_observe(s, envoy_config, two, 2);
  allot_stream_observe(s, envoy_config, two, 2);  // observed again: replaced, not leaked
  envoy_dynamic_module_on_http_filter_destroy(s);
  CHECK(config_counters[5] == 1 && config_counters[15] == 1 && sum(config_counters) == 2,
        "reset: reset counters %llu, %llu of %llu", (unsigned long long)config_counters[5],
        (unsigned long long)config_counters[15], (unsigned long long)sum(config_counters));
  CHECK(last_config == envoy_config, "reset counted on configuration %#lx, want %#lx", (unsigned long)last_config,
        (unsigned long)envoy_config);
  CHECK(sum(counters) == 0 && nsamples[6] == 0, "reset: counted as a response");

  // A stream of an even handle that observes nothing counts nothing; one
  // with a sticky cookie and outcomes does both.
  reset_fake();
  s = envoy_dynamic_module_on_http_filter_new(4, filter);
  envoy_dynamic_module_on_http_filter_response_headers(filter, s, true);
  envoy_dynamic_module_on_http_filter_destroy(s);
  CHECK(sum(counters) + sum(config_counters) == 0 && added == 0, "unobserved stream: a callback was made");
  s = envoy_dynamic_module_on_http_filter_new(4, filter);
  allot_stream_set_header(s, "set-cookie", 10, "sb=1", 4);
  allot_stream_observe(s, envoy_config, two, 1);
  status = "200";
  envoy_dynamic_module_on_http_filter_response_headers(filter, s, true);
  envoy_dynamic_module_on_http_filter_destroy(s);
  CHECK(added == 1 && counters[0] == 1, "cookie and outcome: %d headers added, 2xx %llu", added,
        (unsigned long long)counters[0]);

  if (failures == 0) printf("ok\n");
  return failures != 0;
}
