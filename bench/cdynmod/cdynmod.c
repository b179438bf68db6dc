// cdynmod is benchmark variant O: variant N (bench/mindynmod) written in C,
// the floor of Envoy's native host: what a filter that reads the request
// headers, hashes x-user-id with GrowthBook's hash v1 (FNV-1a 32 of id+seed,
// modulo 1000) and adds x-experiment-bench costs with no language runtime
// in between. It makes the same three callbacks per request as N (the
// headers' count, the headers, one add).
//
//	gcc -O2 -shared -fPIC -o libcdynmod.so bench/cdynmod/cdynmod.c
//
// Like filter/dynmod it declares only the few ABI types and callbacks it
// uses, from source/extensions/dynamic_modules/abi/abi.h (ABI v0.2.0, Envoy
// 1.40), with Envoy's pointer types as uintptr_t; and, since Envoy refuses
// an HTTP filter module unless it exports every hook, it exports each of
// those filter/dynmod exports (from Go, exports.go, and from C, hooks.c),
// the unused ones as no-ops (TestCModuleExportsEveryHook keeps the lists
// equal).

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  const char* ptr;
  size_t length;
} buffer;

typedef struct {
  const char* key_ptr;
  size_t key_length;
  const char* value_ptr;
  size_t value_length;
} header;

enum { request_headers = 0 };

extern size_t envoy_dynamic_module_callback_http_get_headers_size(uintptr_t filter, int32_t header_type);
extern bool envoy_dynamic_module_callback_http_get_headers(uintptr_t filter, int32_t header_type, header* result);
extern bool envoy_dynamic_module_callback_http_add_header(uintptr_t filter, int32_t header_type, buffer key,
                                                          buffer value);

#define EXPORT __attribute__((visibility("default")))

static const char unit_header[] = "x-user-id";
static const char bench_header[] = "x-experiment-bench";
static const char seed[] = "bench";

// variation is GrowthBook's hash v1 of id with seed "bench" split 50/50.
static const char* variation(const char* id, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (uint8_t)id[i];
    h *= 16777619u;
  }
  for (size_t i = 0; i < sizeof seed - 1; i++) {
    h ^= (uint8_t)seed[i];
    h *= 16777619u;
  }
  return h % 1000 < 500 ? "control" : "treatment";
}

EXPORT const char* envoy_dynamic_module_on_program_init(void) { return "v0.2.0"; }

EXPORT uintptr_t envoy_dynamic_module_on_http_filter_config_new(uintptr_t config, buffer name, buffer cfg) {
  return 1;
}

EXPORT void envoy_dynamic_module_on_http_filter_config_destroy(uintptr_t config) {}

EXPORT uintptr_t envoy_dynamic_module_on_http_filter_new(uintptr_t config, uintptr_t filter) { return config; }

EXPORT void envoy_dynamic_module_on_http_filter_destroy(uintptr_t module) {}

// The request hook: read the headers onto the stack, find the unit id, add
// one header. A request with more headers than the stack holds is left
// alone (the benchmark's carry seven).
EXPORT int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t filter, uintptr_t module,
                                                                   bool end_of_stream) {
  header hs[64];
  size_t n = envoy_dynamic_module_callback_http_get_headers_size(filter, request_headers);
  if (n == 0 || n > sizeof hs / sizeof hs[0] ||
      !envoy_dynamic_module_callback_http_get_headers(filter, request_headers, hs)) {
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    if (hs[i].key_length == sizeof unit_header - 1 && hs[i].value_length > 0 &&
        memcmp(hs[i].key_ptr, unit_header, sizeof unit_header - 1) == 0) {
      const char* v = variation(hs[i].value_ptr, hs[i].value_length);
      buffer key = {bench_header, sizeof bench_header - 1};
      buffer value = {v, strlen(v)};
      envoy_dynamic_module_callback_http_add_header(filter, request_headers, key, value);
      break;
    }
  }
  return 0;
}

// The hooks the filter has no use for.

EXPORT uintptr_t envoy_dynamic_module_on_http_filter_per_route_config_new(buffer name, buffer cfg) { return 0; }
EXPORT void envoy_dynamic_module_on_http_filter_per_route_config_destroy(uintptr_t c) {}
EXPORT int32_t envoy_dynamic_module_on_http_filter_request_body(uintptr_t f, uintptr_t m, bool eos) { return 0; }
EXPORT int32_t envoy_dynamic_module_on_http_filter_request_trailers(uintptr_t f, uintptr_t m) { return 0; }
EXPORT int32_t envoy_dynamic_module_on_http_filter_response_headers(uintptr_t f, uintptr_t m, bool eos) { return 0; }
EXPORT int32_t envoy_dynamic_module_on_http_filter_response_body(uintptr_t f, uintptr_t m, bool eos) { return 0; }
EXPORT int32_t envoy_dynamic_module_on_http_filter_response_trailers(uintptr_t f, uintptr_t m) { return 0; }
EXPORT void envoy_dynamic_module_on_http_filter_stream_complete(uintptr_t f, uintptr_t m) {}
EXPORT int32_t envoy_dynamic_module_on_http_filter_local_reply(uintptr_t f, uintptr_t m, uint32_t code, buffer details,
                                                               bool reset) {
  return 0;
}
EXPORT void envoy_dynamic_module_on_http_filter_http_callout_done(uintptr_t f, uintptr_t m, uint64_t id, int32_t result,
                                                                  uintptr_t headers, size_t nh, uintptr_t body,
                                                                  size_t nb) {}
EXPORT void envoy_dynamic_module_on_http_filter_http_stream_headers(uintptr_t f, uintptr_t m, uint64_t id,
                                                                    uintptr_t headers, size_t n, bool eos) {}
EXPORT void envoy_dynamic_module_on_http_filter_http_stream_data(uintptr_t f, uintptr_t m, uint64_t id, uintptr_t data,
                                                                 size_t n, bool eos) {}
EXPORT void envoy_dynamic_module_on_http_filter_http_stream_trailers(uintptr_t f, uintptr_t m, uint64_t id,
                                                                     uintptr_t trailers, size_t n) {}
EXPORT void envoy_dynamic_module_on_http_filter_http_stream_complete(uintptr_t f, uintptr_t m, uint64_t id) {}
EXPORT void envoy_dynamic_module_on_http_filter_http_stream_reset(uintptr_t f, uintptr_t m, uint64_t id,
                                                                  int32_t reason) {}
EXPORT void envoy_dynamic_module_on_http_filter_scheduled(uintptr_t f, uintptr_t m, uint64_t id) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_scheduled(uintptr_t c, uintptr_t h, uint64_t id) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_callout_done(uintptr_t c, uintptr_t h, uint64_t id,
                                                                         int32_t result, uintptr_t headers, size_t nh,
                                                                         uintptr_t body, size_t nb) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_stream_headers(uintptr_t c, uintptr_t h, uint64_t id,
                                                                           uintptr_t headers, size_t n, bool eos) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_stream_data(uintptr_t c, uintptr_t h, uint64_t id,
                                                                        uintptr_t data, size_t n, bool eos) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_stream_trailers(uintptr_t c, uintptr_t h, uint64_t id,
                                                                            uintptr_t trailers, size_t n) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_stream_complete(uintptr_t c, uintptr_t h, uint64_t id) {}
EXPORT void envoy_dynamic_module_on_http_filter_config_http_stream_reset(uintptr_t c, uintptr_t h, uint64_t id,
                                                                         int32_t reason) {}
EXPORT void envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(uintptr_t f, uintptr_t m) {}
EXPORT void envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(uintptr_t f, uintptr_t m) {}
