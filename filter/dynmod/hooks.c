// The HTTP-filter hooks that never need Go. Envoy refuses a module unless it
// exports every hook of the ABI (v0.2.0, Envoy 1.40:
// source/extensions/dynamic_modules/abi/abi.h in envoyproxy/envoy), and it
// calls most of them for every stream whether or not the module cares. Each
// call into Go from an Envoy worker thread costs a cgo callback: the thread
// takes a P from the Go scheduler and gives it back. So the hooks Allot has
// no use for are plain C, and a stream's own hooks are too: a stream needs
// no state of its own (its module value is its configuration's handle), so
// filter-new and filter-destroy stay in C, and a request enters Go exactly
// once, for its request headers (exports.go). docs/perf/native.md has the
// measurement.
//
// Pointers the ABI types as pointers are uintptr_t here, as in the Go
// hooks: the same registers. Status-returning hooks return 0, Continue.
//
// A request the plugin answers itself (issue #45) is the exception: its
// request hook stops the stream (StopIteration) and, when it waits for the
// body, marks the stream (allot_stream.await_body), whose body and
// trailers hooks then enter Go (allot_go_request_body, exports.go) until
// Go no longer buffers it. Only such a stream's body enters Go: any other
// stream's body hook is one or two branches in C.
//
// A configuration whose handle is odd keeps no state per stream: a
// stream's module value is the handle itself. A configuration whose handle
// is even gives each stream an allot_stream (stream.h), where the request
// hook may leave a response header that the response-headers hook adds,
// and the stat ids of its observed variations, whose outcomes the
// response-headers hook (or, without a response, filter-destroy) counts,
// here in C: a response never enters Go.

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "callbacks.h"
#include "reply.h"
#include "wcache.h"

// allot_go_request_body is the Go half of the body and trailers hooks of a
// stream that awaits its body (exports.go): a body hook's status.
extern int32_t allot_go_request_body(uintptr_t f, uintptr_t m, bool eos);

// A stream's module value is its configuration's handle (never 0: 0 would
// make Envoy close the stream, and a configuration Envoy accepted has a
// non-zero handle), or, for an even handle, its allot_stream (0 if it
// cannot be allocated: Envoy 1.40 still calls the stream's hooks, with 0,
// and each hook here and in exports.go passes such a stream through),
// with room for the outcome ids of its configuration's observed
// experiments when the warm path knows them (allot_warm_observed).
uintptr_t envoy_dynamic_module_on_http_filter_new(uintptr_t config, uintptr_t filter) {
  if (config & 1) return config;
  return (uintptr_t)allot_stream_new(config, allot_warm_observed(config));
}

// A stream that ends with outcomes still to count got no response
// headers (the downstream client went first: plugin.ClassAborted): each of
// its observed variations counts one aborted request, on the
// configuration's counters (the stream's filter is going).
void envoy_dynamic_module_on_http_filter_destroy(uintptr_t module) {
  if (module == 0 || (module & 1)) return;
  allot_stream* s = (allot_stream*)module;
  for (size_t i = 0; i < s->n_outcomes; i++) {
    envoy_dynamic_module_callback_http_filter_config_increment_counter(
        s->envoy_config, s->outcomes[i * ALLOT_OUTCOME_IDS + ALLOT_CLASS_ABORTED], NULL, 0, 1);
  }
  allot_stream_drop_outcomes(s);
  free(s->header);
  free(s);
}

// allot_record_outcomes counts a response in the class of its :status for
// each observed variation of the stream's request, and records the
// milliseconds since the request headers in each one's histogram.
static void allot_record_outcomes(uintptr_t f, allot_stream* s) {
  allot_buffer status = {NULL, 0};
  allot_buffer key = {":status", 7};
  int class = ALLOT_CLASS_OTHER;
  if (envoy_dynamic_module_callback_http_get_header(f, 2, key, &status, 0, NULL)) {  // 2: response headers
    class = allot_status_class(status.ptr, status.length);
  }
  int64_t elapsed = allot_now_ns() - s->start_ns;
  uint64_t ms = elapsed > 0 ? (uint64_t)elapsed / 1000000 : 0;
  for (size_t i = 0; i < s->n_outcomes; i++) {
    const size_t* ids = s->outcomes + i * ALLOT_OUTCOME_IDS;
    envoy_dynamic_module_callback_http_filter_increment_counter(f, ids[class], NULL, 0, 1);
    envoy_dynamic_module_callback_http_filter_record_histogram_value(f, ids[ALLOT_OUTCOME_IDS - 1], NULL, 0, ms);
  }
  allot_stream_drop_outcomes(s);
}

// Allot has no per-route configuration: refuse one.
uintptr_t envoy_dynamic_module_on_http_filter_per_route_config_new(allot_buffer name, allot_buffer config) {
  return 0;
}

void envoy_dynamic_module_on_http_filter_per_route_config_destroy(uintptr_t config) {}

// A stream that awaits its body hands each part to Go, which answers
// StopIterationAndBuffer while it wants more; any other answer ends the
// wait. Any other stream's body continues.
int32_t envoy_dynamic_module_on_http_filter_request_body(uintptr_t f, uintptr_t m, bool eos) {
  if (m == 0 || (m & 1)) return ALLOT_BODY_CONTINUE;
  allot_stream* s = (allot_stream*)m;
  if (!s->await_body) return ALLOT_BODY_CONTINUE;
  int32_t status = allot_go_request_body(f, m, eos);
  if (status != ALLOT_BODY_STOP_AND_BUFFER) s->await_body = false;
  return status;
}

// Trailers end a request whose last body part did not: a stream still
// awaiting its body gets its end here (the whole body is buffered by
// then), and stops unless Go lets it continue.
int32_t envoy_dynamic_module_on_http_filter_request_trailers(uintptr_t f, uintptr_t m) {
  if (m == 0 || (m & 1)) return ALLOT_TRAILERS_CONTINUE;
  allot_stream* s = (allot_stream*)m;
  if (!s->await_body) return ALLOT_TRAILERS_CONTINUE;
  s->await_body = false;
  return allot_go_request_body(f, m, true) == ALLOT_BODY_CONTINUE ? ALLOT_TRAILERS_CONTINUE
                                                                  : ALLOT_TRAILERS_STOP_ITERATION;
}

// The response header the request hook left, if any, goes downstream;
// the outcomes of its observed variations are counted.
int32_t envoy_dynamic_module_on_http_filter_response_headers(uintptr_t f, uintptr_t m, bool eos) {
  if (m == 0 || (m & 1)) return 0;
  allot_stream* s = (allot_stream*)m;
  if (s->outcomes != NULL) allot_record_outcomes(f, s);
  if (s->header == NULL) return 0;
  allot_buffer k = {s->header, s->name_length};
  allot_buffer v = {s->header + s->name_length, s->value_length};
  envoy_dynamic_module_callback_http_add_header(f, 2, k, v);  // 2: response headers
  free(s->header);
  s->header = NULL;
  return 0;
}

int32_t envoy_dynamic_module_on_http_filter_response_body(uintptr_t f, uintptr_t m, bool eos) { return 0; }

int32_t envoy_dynamic_module_on_http_filter_response_trailers(uintptr_t f, uintptr_t m) { return 0; }

void envoy_dynamic_module_on_http_filter_stream_complete(uintptr_t f, uintptr_t m) {}

int32_t envoy_dynamic_module_on_http_filter_local_reply(uintptr_t f, uintptr_t m, uint32_t code,
                                                        allot_buffer details, bool reset) {
  return 0;
}

void envoy_dynamic_module_on_http_filter_http_callout_done(uintptr_t f, uintptr_t m, uint64_t id, int32_t result,
                                                           uintptr_t headers, size_t nh, uintptr_t body,
                                                           size_t nb) {}

void envoy_dynamic_module_on_http_filter_http_stream_headers(uintptr_t f, uintptr_t m, uint64_t id,
                                                             uintptr_t headers, size_t n, bool eos) {}

void envoy_dynamic_module_on_http_filter_http_stream_data(uintptr_t f, uintptr_t m, uint64_t id, uintptr_t data,
                                                          size_t n, bool eos) {}

void envoy_dynamic_module_on_http_filter_http_stream_trailers(uintptr_t f, uintptr_t m, uint64_t id,
                                                              uintptr_t trailers, size_t n) {}

void envoy_dynamic_module_on_http_filter_http_stream_complete(uintptr_t f, uintptr_t m, uint64_t id) {}

void envoy_dynamic_module_on_http_filter_http_stream_reset(uintptr_t f, uintptr_t m, uint64_t id, int32_t reason) {}

void envoy_dynamic_module_on_http_filter_scheduled(uintptr_t f, uintptr_t m, uint64_t id) {}

void envoy_dynamic_module_on_http_filter_config_scheduled(uintptr_t c, uintptr_t h, uint64_t id) {}

void envoy_dynamic_module_on_http_filter_config_http_callout_done(uintptr_t c, uintptr_t h, uint64_t id,
                                                                  int32_t result, uintptr_t headers, size_t nh,
                                                                  uintptr_t body, size_t nb) {}

void envoy_dynamic_module_on_http_filter_config_http_stream_headers(uintptr_t c, uintptr_t h, uint64_t id,
                                                                    uintptr_t headers, size_t n, bool eos) {}

void envoy_dynamic_module_on_http_filter_config_http_stream_data(uintptr_t c, uintptr_t h, uint64_t id,
                                                                 uintptr_t data, size_t n, bool eos) {}

void envoy_dynamic_module_on_http_filter_config_http_stream_trailers(uintptr_t c, uintptr_t h, uint64_t id,
                                                                     uintptr_t trailers, size_t n) {}

void envoy_dynamic_module_on_http_filter_config_http_stream_complete(uintptr_t c, uintptr_t h, uint64_t id) {}

void envoy_dynamic_module_on_http_filter_config_http_stream_reset(uintptr_t c, uintptr_t h, uint64_t id,
                                                                  int32_t reason) {}

void envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(uintptr_t f, uintptr_t m) {}

void envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(uintptr_t f, uintptr_t m) {}
