// The warm path's hit (docs/perf/native-warm-path.md): a request of a
// configuration whose C side has a plan, whose headers build a key its
// worker's cache holds, and whose :path is not under the prefix of the
// requests the configuration answers itself, is served here — its assignment's headers rendered
// and added in Go's order, the exposure record, the counts, an observed
// assignment's outcome stat ids left in the stream, the route cleared —
// without entering Go. warm.c's request hook calls it and hands Go every
// request it does not serve. It is apart from warm.c, which calls into Go
// (_cgo_export.h), so that testdata/warm_test.c builds it over fake
// callbacks.

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "callbacks.h"
#include "wcache.h"

// allot_warm_handles is whether the Handler's handles are allot_wconfig
// addresses (dynmod.WarmHandler); set by SetHandler, before any hook.
static bool allot_warm_handles;

void allot_set_warm_handles(bool on) { allot_warm_handles = on; }

size_t allot_warm_observed(uintptr_t h) {
  if (!allot_warm_handles || h == 0 || (h & 1)) return 0;
  const allot_wrender* r = ((const allot_wconfig*)h)->render;
  return r != NULL ? r->n_observed : 0;
}

bool allot_warm_serve(uintptr_t f, uintptr_t m) {
  if (!allot_warm_handles || m == 0) return false;
  const uintptr_t h = (m & 1) ? m : allot_stream_config(m);
  const allot_wconfig* w = (const allot_wconfig*)(h & ~(uintptr_t)1);
  if (w->plan == NULL) return false;
  const allot_wrender* r = w->render;
  // An observed configuration's streams have state (an even value): its
  // outcomes go there.
  if (r->n_observed > 0 && (m & 1)) return false;
  uint32_t i = envoy_dynamic_module_callback_http_filter_get_worker_index(f);
  if (i >= w->n_workers) return false;
  allot_wcache* c = w->workers[i];
  if (c->slots == NULL) return false;  // nothing cached on this worker yet: read nothing
  if (!allot_wcache_should_look(c)) return false;  // its recent looks mostly missed
  size_t n = envoy_dynamic_module_callback_http_get_headers_size(f, 0);  // 0: request headers
  const allot_wentry* e = NULL;
  const bool hit = n <= ALLOT_WCACHE_MAX_HEADERS &&
                   (n == 0 || envoy_dynamic_module_callback_http_get_headers(f, 0, c->hdrs)) &&
                   allot_wcache_find(c, c->hdrs, n, &e) == ALLOT_WFIND_HIT;
  // A request the configuration answers itself (its :path under the answer
  // prefix) is Go's, whatever the cache holds; not a look either. A
  // configuration that answers none pays one branch, on a hit.
  if (hit && w->answer_prefix.length > 0 && allot_answered(c->hdrs, n, w->answer_prefix)) return false;
  allot_wcache_looked(c, hit);
  if (!hit) return false;
  const uint32_t* items = allot_wentry_items(e);
  // The dictionary first (nothing is added yet if an item is out of
  // range), then the adds in addBatch's order.
  size_t dl = 0;
  for (uint32_t k = 0; k < e->n_items; k++) {
    uint32_t x = items[k] >> 16, v = items[k] & 0xffff;
    if (x >= r->n_exps || v >= r->exps[x].n_vars) return false;
    allot_buffer member = r->exps[x].members[v];
    if (member.length > c->dict_cap - dl) return false;  // never: dict_cap is the longest dictionary
    memcpy(c->dict + dl, member.ptr, member.length);
    dl += member.length;
  }
  allot_buffer dict = dl > 2 ? (allot_buffer){c->dict + 2, dl - 2} : (allot_buffer){c->dict, 0};  // without the first ", "
  bool added = false;
  if (r->per_experiment) {
    for (uint32_t k = 0; k < e->n_items; k++) {
      const allot_wexp* x = &r->exps[items[k] >> 16];
      if (!envoy_dynamic_module_callback_http_add_header(f, 0, x->header, x->values[items[k] & 0xffff])) {
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
    allot_wcache_count(c, r->exps[items[k] >> 16].stats[items[k] & 0xffff], 1);
  }
  size_t no = 0;
  for (uint32_t k = 0; k < e->n_items && r->n_observed > 0; k++) {
    const allot_wexp* x = &r->exps[items[k] >> 16];
    if (x->outcomes == NULL || no + ALLOT_OUTCOME_IDS > c->obs_cap) continue;
    memcpy(c->obs + no, x->outcomes + (size_t)(items[k] & 0xffff) * ALLOT_OUTCOME_IDS,
           ALLOT_OUTCOME_IDS * sizeof(size_t));
    no += ALLOT_OUTCOME_IDS;
  }
  // The stream has room for them (allot_stream_new, allot_warm_observed):
  // this copies, and allocates nothing.
  if (no > 0 && !allot_stream_observe(m, r->envoy_config, c->obs, no / ALLOT_OUTCOME_IDS) && r->has_unrecorded) {
    allot_wcache_count(c, r->unrecorded, 1);  // as module.observe: served, its outcome not counted
  }
  if (added) envoy_dynamic_module_callback_http_clear_route_cache(f);
  return true;
}
