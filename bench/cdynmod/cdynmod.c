// cdynmod is benchmark variant O: variant N (bench/mindynmod) written in C,
// the floor of Envoy's native host: what a filter that reads the request
// headers, hashes x-user-id with GrowthBook's hash v1 (FNV-1a 32 of id+seed,
// modulo 1000) and adds x-experiment-bench costs with no language runtime
// in between. It makes the same three callbacks per request as N (the
// headers' count, the headers, one add).
//
// Given a write script as its filter_config (bench/floor's text form, in a
// google.protobuf.StringValue, as N takes it for U), it is variant o, the
// floor of Allot native's Q writes through the dynamic-modules ABI: after
// the same read and hash it makes the callbacks Allot's C warm path
// (filter/dynmod/wserve.c) makes on a hit — one add_header per scripted
// header, in the script's order, one set_filter_state_bytes per property
// under "wasm." + its path, then clear_route_cache. The script is parsed
// once, at configuration time, into both variations' values, so a request
// only picks them.
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
#include <stdlib.h>
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
extern bool envoy_dynamic_module_callback_http_set_filter_state_bytes(uintptr_t filter, buffer key, buffer value);
extern void envoy_dynamic_module_callback_http_clear_route_cache(uintptr_t filter);

#define EXPORT __attribute__((visibility("default")))

static const char unit_header[] = "x-user-id";
static const char bench_header[] = "x-experiment-bench";
static const char seed[] = "bench";

// variation is GrowthBook's hash v1 of id with seed "bench" split 50/50:
// 0 (control) or 1 (treatment).
static int variation(const char* id, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (uint8_t)id[i];
    h *= 16777619u;
  }
  for (size_t i = 0; i < sizeof seed - 1; i++) {
    h ^= (uint8_t)seed[i];
    h *= 16777619u;
  }
  return h % 1000 < 500 ? 0 : 1;
}

static const char* const variations[2] = {"control", "treatment"};

// The write script (bench/floor): its magic line, what stands for the
// variation in a value, and its bounds — a script past them is refused.
// Q's has about 17 headers and one property, each value well under 1 KiB.
static const char script_magic[] = "minwasm-script\n";
static const char script_var[] = "$v";
static const char state_prefix[] = "wasm.";
enum { max_script_bytes = 64 << 10, max_writes = 64 };

// entry is one scripted header or property, with its value rendered for
// each variation.
typedef struct {
  buffer name;
  buffer value[2];
} entry;

// script is a parsed write script: what one configuration's requests make.
// Its strings live in the same allocation, after it.
typedef struct {
  size_t n_headers, n_states;
  entry headers[max_writes], states[max_writes];
} script;

// no_script is the configuration handle without a script: variant O.
static const uintptr_t no_script = 1;

// field cuts s[*at, end) at the next c, returning the part before it and
// moving *at past it; the last field runs to end.
static buffer field(const char* s, size_t* at, size_t end, char c) {
  size_t i = *at;
  while (i < end && s[i] != c) i++;
  buffer b = {s + *at, i - *at};
  *at = i < end ? i + 1 : i;
  return b;
}

// put copies b to *out (advancing it) and returns the copy.
static buffer put(char** out, const char* prefix, size_t np, buffer b) {
  buffer c = {*out, np + b.length};
  memcpy(*out, prefix, np);
  memcpy(*out + np, b.ptr, b.length);
  *out += c.length;
  return c;
}

// render copies v to *out with its first script_var replaced by variation
// x, and returns the copy.
static buffer render(char** out, buffer v, int x) {
  const char* var = NULL;
  for (size_t i = 0; i + sizeof script_var - 1 <= v.length; i++) {
    if (memcmp(v.ptr + i, script_var, sizeof script_var - 1) == 0) {
      var = v.ptr + i;
      break;
    }
  }
  if (var == NULL) return put(out, "", 0, v);
  size_t before = (size_t)(var - v.ptr), nx = strlen(variations[x]);
  buffer c = {*out, v.length - (sizeof script_var - 1) + nx};
  memcpy(*out, v.ptr, before);
  memcpy(*out + before, variations[x], nx);
  memcpy(*out + before + nx, var + sizeof script_var - 1, v.length - before - (sizeof script_var - 1));
  *out += c.length;
  return c;
}

// parse_script reads cfg, bench/floor's text form — the magic line, "add"
// or "rewrite" (both written one add each, as the warm path writes), then
// "header|property TAB name TAB value" lines — into one allocation, or
// returns NULL for anything else.
static script* parse_script(buffer cfg) {
  const size_t nm = sizeof script_magic - 1, nv = sizeof script_var - 1, np = sizeof state_prefix - 1;
  if (cfg.length > max_script_bytes || cfg.length < nm || memcmp(cfg.ptr, script_magic, nm) != 0) return NULL;
  // Each value rendered twice, each variation at most "treatment" long.
  size_t room = 2 * cfg.length + 2 * max_writes * (np + 2 * (sizeof "treatment" - nv));
  script* sc = calloc(1, sizeof(script) + room);
  if (sc == NULL) return NULL;
  char* out = (char*)(sc + 1);
  size_t at = nm, end = cfg.length;
  if (end > at && cfg.ptr[end - 1] == '\n') end--;
  buffer mode = field(cfg.ptr, &at, end, '\n');
  const bool add = mode.length == 3 && memcmp(mode.ptr, "add", 3) == 0;
  const bool rewrite = mode.length == 7 && memcmp(mode.ptr, "rewrite", 7) == 0;
  if (!add && !rewrite) goto fail;
  while (at < end) {
    buffer line = field(cfg.ptr, &at, end, '\n');
    const char* stop = line.ptr + line.length;
    const char* t1 = memchr(line.ptr, '\t', line.length);
    const char* t2 = t1 != NULL ? memchr(t1 + 1, '\t', (size_t)(stop - t1 - 1)) : NULL;
    if (t2 == NULL) goto fail;  // fewer than three fields
    buffer kind = {line.ptr, (size_t)(t1 - line.ptr)};
    buffer name = {t1 + 1, (size_t)(t2 - t1 - 1)};
    buffer value = {t2 + 1, (size_t)(stop - t2 - 1)};
    if (name.length == 0 || memchr(value.ptr, '\t', value.length) != NULL) goto fail;  // no name, or a fourth field
    entry* w;
    const char* prefix = "";
    if (kind.length == 6 && memcmp(kind.ptr, "header", 6) == 0 && sc->n_headers < max_writes) {
      w = &sc->headers[sc->n_headers++];
    } else if (kind.length == 8 && memcmp(kind.ptr, "property", 8) == 0 && sc->n_states < max_writes) {
      w = &sc->states[sc->n_states++];
      prefix = state_prefix;
    } else {
      goto fail;
    }
    w->name = put(&out, prefix, strlen(prefix), name);
    w->value[0] = render(&out, value, 0);
    w->value[1] = render(&out, value, 1);
  }
  return sc;
fail:
  free(sc);
  return NULL;
}

EXPORT const char* envoy_dynamic_module_on_program_init(void) { return "v0.2.0"; }

// A configuration is O's (no filter_config) or o's (a write script, parsed
// here); anything else is refused (0), which Envoy reports.
EXPORT uintptr_t envoy_dynamic_module_on_http_filter_config_new(uintptr_t config, buffer name, buffer cfg) {
  if (cfg.length == 0) return no_script;
  script* sc = parse_script(cfg);
  return sc != NULL ? (uintptr_t)sc : 0;
}

EXPORT void envoy_dynamic_module_on_http_filter_config_destroy(uintptr_t config) {
  if (config != no_script) free((void*)config);
}

EXPORT uintptr_t envoy_dynamic_module_on_http_filter_new(uintptr_t config, uintptr_t filter) { return config; }

EXPORT void envoy_dynamic_module_on_http_filter_destroy(uintptr_t module) {}

// The request hook: read the headers onto the stack, find the unit id and
// hash it; then add one header (O), or make the script's writes as the
// warm path makes them (o). A request with more headers than the stack
// holds is left alone (the benchmark's carry seven).
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
      int x = variation(hs[i].value_ptr, hs[i].value_length);
      if (module == no_script) {
        buffer key = {bench_header, sizeof bench_header - 1};
        buffer value = {variations[x], strlen(variations[x])};
        envoy_dynamic_module_callback_http_add_header(filter, request_headers, key, value);
        break;
      }
      const script* sc = (const script*)module;
      for (size_t k = 0; k < sc->n_headers; k++) {
        envoy_dynamic_module_callback_http_add_header(filter, request_headers, sc->headers[k].name,
                                                      sc->headers[k].value[x]);
      }
      for (size_t k = 0; k < sc->n_states; k++) {
        envoy_dynamic_module_callback_http_set_filter_state_bytes(filter, sc->states[k].name, sc->states[k].value[x]);
      }
      if (sc->n_headers > 0) envoy_dynamic_module_callback_http_clear_route_cache(filter);
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
