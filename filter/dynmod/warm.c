// The request-headers hook: the warm path in C, Go for everything else
// (docs/perf/native-warm-path.md). A request of a configuration whose C
// side has a plan, whose headers build a key its worker's cache holds, is
// served here: its assignment's headers rendered and added in Go's order,
// the exposure record, the counts, the route cleared. Any other request, and one whose
// add Envoy refuses, enters Go (allot_go_request_headers, exports.go),
// which runs as it always did: C's partial adds carry names the filter
// owns, so Go removes them first, as it removes forged ones.

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_cgo_export.h"
#include "callbacks.h"
#include "wcache.h"

// allot_warm_handles is whether the Handler's handles are allot_wconfig
// addresses (dynmod.WarmHandler); set by SetHandler, before any hook.
static bool allot_warm_handles;

void allot_set_warm_handles(bool on) { allot_warm_handles = on; }

// allot_warm_serve serves a request from its worker's cache; false if it
// did not (nothing counted; headers possibly added, which Go removes).
static bool allot_warm_serve(uintptr_t f, uintptr_t m) {
  uintptr_t h = (m & 1) ? m : ((allot_stream*)m)->config;
  const allot_wconfig* w = (const allot_wconfig*)(h & ~(uintptr_t)1);
  if (w->plan == NULL) return false;
  uint32_t i = envoy_dynamic_module_callback_http_filter_get_worker_index(f);
  if (i >= w->n_workers) return false;
  allot_wcache* c = w->workers[i];
  size_t n = envoy_dynamic_module_callback_http_get_headers_size(f, 0);  // 0: request headers
  if (n > ALLOT_WCACHE_MAX_HEADERS) return false;
  if (n > 0 && !envoy_dynamic_module_callback_http_get_headers(f, 0, c->hdrs)) return false;
  const allot_wentry* e;
  if (allot_wcache_find(c, c->hdrs, n, &e) != ALLOT_WFIND_HIT) return false;
  const allot_wrender* r = w->render;
  // An observed configuration's streams have state (an even value): its
  // outcomes go there.
  if (r->n_observed > 0 && (m & 1)) return false;
  // The dictionary first (nothing is added yet if an item is out of
  // range), then the adds in addBatch's order.
  size_t dl = 0;
  for (uint32_t k = 0; k < e->n_items; k++) {
    uint32_t x = e->items[k] >> 16, v = e->items[k] & 0xffff;
    if (x >= r->n_exps || v >= r->exps[x].n_vars) return false;
    allot_buffer m = r->exps[x].members[v];
    if (m.length > c->dict_cap - dl) return false;  // never: dict_cap is the longest dictionary
    memcpy(c->dict + dl, m.ptr, m.length);
    dl += m.length;
  }
  allot_buffer dict = {c->dict + 2, dl > 2 ? dl - 2 : 0};  // without the first ", "
  bool added = false;
  if (r->per_experiment) {
    for (uint32_t k = 0; k < e->n_items; k++) {
      const allot_wexp* x = &r->exps[e->items[k] >> 16];
      if (!envoy_dynamic_module_callback_http_add_header(f, 0, x->header, x->values[e->items[k] & 0xffff])) {
        return false;
      }
      added = true;
    }
  }
  if (dict.length > 0) {
    if (!envoy_dynamic_module_callback_http_add_header(f, 0, r->dictionary, dict)) return false;
    added = true;
  }
  if (r->version.length > 0) {
    if (!envoy_dynamic_module_callback_http_add_header(f, 0, r->version_header, r->version)) return false;
    added = true;
  }
  if (r->exposure && dict.length > 0) {
    envoy_dynamic_module_callback_http_set_filter_state_bytes(f, w->exposure_key, dict);  // losing it costs the record only
  }
  allot_wcache_count(c, r->evaluated, 1);
  allot_wcache_count(c, r->hits, 1);
  for (uint32_t k = 0; k < e->n_items; k++) {
    allot_wcache_count(c, r->exps[e->items[k] >> 16].stats[e->items[k] & 0xffff], 1);
  }
  size_t no = 0;
  for (uint32_t k = 0; k < e->n_items && r->n_observed > 0; k++) {
    const allot_wexp* x = &r->exps[e->items[k] >> 16];
    if (x->outcomes == NULL || no + ALLOT_OUTCOME_IDS > c->obs_cap) continue;
    memcpy(c->obs + no, x->outcomes + (size_t)(e->items[k] & 0xffff) * ALLOT_OUTCOME_IDS,
           ALLOT_OUTCOME_IDS * sizeof(size_t));
    no += ALLOT_OUTCOME_IDS;
  }
  if (no > 0 && !allot_stream_observe(m, r->envoy_config, c->obs, no / ALLOT_OUTCOME_IDS) && r->has_unrecorded) {
    allot_wcache_count(c, r->unrecorded, 1);  // as module.observe: served, its outcome not counted
  }
  if (added) envoy_dynamic_module_callback_http_clear_route_cache(f);
  return true;
}

// A stream whose module value is 0 (no state could be allocated) is
// Go's, which passes it through; so is every stream of a Handler whose
// handles are not allot_wconfig addresses.
int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t f, uintptr_t m, bool eos) {
  if (allot_warm_handles && m != 0 && allot_warm_serve(f, m)) return 0;
  return allot_go_request_headers(f, m, eos);
}
