// The warm path's cache: see wcache.h and docs/perf/native-warm-path.md.

#include "wcache.h"

#include <stdlib.h>
#include <string.h>

#define ALLOT_WAYS 4

static const allot_allocator allot_default_allocator = {malloc, free};

static const allot_allocator* allot_or_default(const allot_allocator* a) {
  return a != NULL && a->alloc != NULL && a->free != NULL ? a : &allot_default_allocator;
}

uint64_t allot_wkey_hash(const char* b, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)b[i];
    h *= 1099511628211ull;
  }
  return h;
}

// allot_copy copies b into fresh memory (an empty buffer stays empty).
static bool allot_copy(const allot_allocator* a, allot_buffer b, allot_buffer* out) {
  *out = (allot_buffer){NULL, 0};
  if (b.length == 0) return true;
  char* p = a->alloc(b.length);
  if (p == NULL) return false;
  memcpy(p, b.ptr, b.length);
  *out = (allot_buffer){p, b.length};
  return true;
}

void allot_wplan_free(allot_wplan* p) {
  if (p == NULL) return;
  const allot_allocator a = p->a;
  if (p->headers != NULL) {
    for (size_t i = 0; i < p->n_headers; i++) a.free((void*)p->headers[i].name);
    a.free(p->headers);
  }
  if (p->consts != NULL) {
    for (size_t i = 0; i < p->n_slots; i++) a.free((void*)p->consts[i].ptr);
    a.free(p->consts);
  }
  a.free((void*)p->prefix.ptr);
  a.free((void*)p->dictionary.ptr);
  a.free((void*)p->version.ptr);
  a.free(p);
}

allot_wplan* allot_wplan_new(size_t n_slots, const allot_wplan_header* headers, size_t n_headers,
                             const allot_buffer* consts, allot_buffer prefix, allot_buffer dictionary,
                             allot_buffer version, const allot_allocator* alloc) {
  const allot_allocator* a = allot_or_default(alloc);
  if (n_slots > ALLOT_WPLAN_MAX_SLOTS || n_headers > ALLOT_WPLAN_MAX_SLOTS || prefix.length == 0 ||
      dictionary.length == 0 || version.length == 0) {
    return NULL;
  }
  for (size_t i = 0; i < n_headers; i++) {
    if (headers[i].slot >= n_slots || headers[i].name_length == 0) return NULL;
  }
  allot_wplan* p = a->alloc(sizeof(allot_wplan));
  if (p == NULL) return NULL;
  memset(p, 0, sizeof(*p));
  p->a = *a;
  p->n_slots = n_slots;
  if (n_headers > 0) {
    p->headers = a->alloc(n_headers * sizeof(allot_wplan_header));
    if (p->headers == NULL) goto fail;
    memset(p->headers, 0, n_headers * sizeof(allot_wplan_header));
    p->n_headers = n_headers;
    for (size_t i = 0; i < n_headers; i++) {
      allot_buffer name;
      if (!allot_copy(a, (allot_buffer){headers[i].name, headers[i].name_length}, &name)) goto fail;
      p->headers[i] = (allot_wplan_header){name.ptr, name.length, headers[i].slot};
    }
  }
  if (n_slots > 0) {
    p->consts = a->alloc(n_slots * sizeof(allot_buffer));
    if (p->consts == NULL) goto fail;
    memset(p->consts, 0, n_slots * sizeof(allot_buffer));
    if (consts != NULL) {
      for (size_t i = 0; i < n_slots; i++) {
        if (!allot_copy(a, consts[i], &p->consts[i])) goto fail;
      }
    }
  }
  if (!allot_copy(a, prefix, &p->prefix) || !allot_copy(a, dictionary, &p->dictionary) ||
      !allot_copy(a, version, &p->version)) {
    goto fail;
  }
  return p;
fail:
  allot_wplan_free(p);
  return NULL;
}

// allot_alloc64 allocates n bytes 64-byte aligned (a cache line of their
// own: allot_wcache), through a, keeping a's pointer before them.
static void* allot_alloc64(const allot_allocator* a, size_t n) {
  char* raw = a->alloc(n + 63 + sizeof(void*));
  if (raw == NULL) return NULL;
  uintptr_t p = ((uintptr_t)raw + sizeof(void*) + 63) & ~(uintptr_t)63;
  ((void**)p)[-1] = raw;
  return (void*)p;
}

static void allot_free64(const allot_allocator* a, void* p) {
  if (p != NULL) a->free(((void**)p)[-1]);
}

// allot_lines rounds n bytes up to whole cache lines.
static size_t allot_lines(size_t n) { return (n + 63) & ~(size_t)63; }

void allot_wcache_free(allot_wcache* c) {
  if (c == NULL) return;
  const allot_allocator a = c->a;
  if (c->slots != NULL) {
    for (size_t i = 0; i < (c->mask + 1) * ALLOT_WAYS; i++) a.free(c->slots[i].e);
  }
  a.free(c->slots);
  a.free(c->hdrs);
  a.free(c->vals);
  a.free(c->key);
  a.free(c->dict);
  a.free(c->obs);
  allot_free64(&a, c->pending);
  allot_free64(&a, c);
}

size_t allot_wcache_ways(size_t max_entries, size_t max_bytes) {
  size_t units = max_bytes / (ALLOT_WENTRY_OVERHEAD + 1);
  if (units > max_entries) units = max_entries;
  size_t sets = 1;
  while (sets * ALLOT_WAYS < units) sets *= 2;
  return sets * ALLOT_WAYS;
}

allot_wcache* allot_wcache_new(const allot_wplan* p, size_t max_entries, size_t max_bytes, size_t n_counters,
                               size_t dict_cap, size_t obs_cap, const allot_allocator* alloc) {
  const allot_allocator* a = allot_or_default(alloc);
  if (p == NULL || max_entries == 0 || max_entries > ALLOT_WCACHE_MAX_ENTRIES || max_bytes == 0 ||
      n_counters > ALLOT_WCACHE_MAX_COUNTERS || dict_cap > ALLOT_WRENDER_MAX_DICTIONARY ||
      obs_cap > 0xffff * ALLOT_OUTCOME_IDS) {
    return NULL;
  }
  allot_wcache* c = allot_alloc64(a, sizeof(allot_wcache));
  if (c == NULL) return NULL;
  memset(c, 0, sizeof(*c));
  c->a = *a;
  c->plan = p;
  c->max_entries = max_entries;
  c->max_bytes = max_bytes;
  c->mask = allot_wcache_ways(max_entries, max_bytes) / ALLOT_WAYS - 1;
  c->oldest = c->newest = ALLOT_WNONE;
  c->dict_cap = dict_cap;
  c->obs_cap = obs_cap;
  c->n_counters = n_counters;
  return c;
}

// allot_wcache_ready allocates, at the cache's first insert (on its
// worker's thread), its slot table, the worker's scratch and its pending
// counts; false, with nothing allocated, on no memory.
static bool allot_wcache_ready(allot_wcache* c) {
  if (c->slots != NULL) return true;
  const allot_allocator* a = &c->a;
  const size_t ways = (c->mask + 1) * ALLOT_WAYS;
  const size_t pending = allot_lines((c->n_counters > 0 ? c->n_counters : 1) * sizeof(uint64_t));
  allot_wslot* slots = a->alloc(ways * sizeof(allot_wslot));
  c->hdrs = a->alloc(ALLOT_WCACHE_MAX_HEADERS * sizeof(allot_header));
  c->vals = a->alloc((c->plan->n_slots > 0 ? c->plan->n_slots : 1) * sizeof(allot_buffer));
  c->key = a->alloc(ALLOT_WCACHE_MAX_KEY);
  c->dict = a->alloc(c->dict_cap > 0 ? c->dict_cap : 1);
  c->obs = a->alloc((c->obs_cap > 0 ? c->obs_cap : 1) * sizeof(size_t));
  uint64_t* counts = allot_alloc64(a, pending);
  if (slots == NULL || c->hdrs == NULL || c->vals == NULL || c->key == NULL || c->dict == NULL || c->obs == NULL ||
      counts == NULL) {
    a->free(slots);
    a->free(c->hdrs);
    a->free(c->vals);
    a->free(c->key);
    a->free(c->dict);
    a->free(c->obs);
    allot_free64(a, counts);
    c->hdrs = NULL, c->vals = NULL, c->key = NULL, c->dict = NULL, c->obs = NULL;
    return false;
  }
  memset(slots, 0, ways * sizeof(allot_wslot));
  memset(counts, 0, pending);
  c->slots = slots;
  __atomic_store_n(&c->pending, counts, __ATOMIC_RELEASE);  // Go's flush reads it from another thread
  return true;
}

void allot_wcache_bump(allot_wcache* c) { c->gen++; }

// allot_drop removes way w's entry from the cache and frees it.
static void allot_drop(allot_wcache* c, uint32_t w) {
  allot_wentry* e = c->slots[w].e;
  if (e->older != ALLOT_WNONE) c->slots[e->older].e->newer = e->newer; else c->oldest = e->newer;
  if (e->newer != ALLOT_WNONE) c->slots[e->newer].e->older = e->older; else c->newest = e->older;
  c->slots[w].e = NULL;
  c->n--;
  c->bytes -= allot_wentry_size(e->n_items, e->key_length);
  c->a.free(e);
}

// allot_same reports whether e holds key and items.
static bool allot_same(const allot_wentry* e, const char* key, size_t key_length, const uint32_t* items,
                       size_t n_items) {
  return e->key_length == key_length && e->n_items == n_items &&
         (key_length == 0 || memcmp(allot_wentry_key(e), key, key_length) == 0) &&
         (n_items == 0 || memcmp(allot_wentry_items(e), items, n_items * sizeof(uint32_t)) == 0);
}

const allot_wentry* allot_wcache_get(allot_wcache* c, uint64_t hash, const char* key, size_t key_length) {
  if (c->slots == NULL) return NULL;
  const size_t base = (hash & c->mask) * ALLOT_WAYS;
  for (size_t i = base; i < base + ALLOT_WAYS; i++) {
    allot_wslot* s = &c->slots[i];
    if (s->e == NULL || s->hash != hash || s->e->key_length != key_length ||
        (key_length > 0 && memcmp(allot_wentry_key(s->e), key, key_length) != 0)) {
      continue;
    }
    if (s->gen != c->gen) {  // a previous generation's: never served
      allot_drop(c, (uint32_t)i);
      return NULL;
    }
    s->used = ++c->tick;
    return s->e;
  }
  return NULL;
}

// allot_lower lowers an ASCII letter.
static inline unsigned char allot_lower(unsigned char b) { return b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b; }

// allot_prefix_fold reports whether s starts with lower-case p, ASCII
// letters compared in any case.
static bool allot_prefix_fold(const char* s, size_t n, allot_buffer p) {
  if (n < p.length) return false;
  for (size_t i = 0; i < p.length; i++) {
    if (allot_lower((unsigned char)s[i]) != (unsigned char)p.ptr[i]) return false;
  }
  return true;
}

// allot_owned reports whether a request header name is one the filter
// owns (Config.isAssignmentHeader) or one whose folding C does not decide
// (a byte ≥ 0x80: Go's strings.EqualFold folds Unicode): both go to Go.
static bool allot_owned(const allot_wplan* p, const char* name, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if ((unsigned char)name[i] >= 0x80) return true;
  }
  return allot_prefix_fold(name, n, p->prefix) || (n == p->dictionary.length && allot_prefix_fold(name, n, p->dictionary)) ||
         (n == p->version.length && allot_prefix_fold(name, n, p->version));
}

int allot_wcache_find(allot_wcache* c, const allot_header* h, size_t n, const allot_wentry** out) {
  const allot_wplan* p = c->plan;
  *out = NULL;
  c->key_length = 0;
  if (c->slots == NULL) return ALLOT_WFIND_MISS;  // nothing inserted yet: nothing to find, no scratch
  if (n > ALLOT_WCACHE_MAX_HEADERS) return ALLOT_WFIND_TOO_MANY;
  if (p->n_slots > 0) memcpy(c->vals, p->consts, p->n_slots * sizeof(allot_buffer));
  for (size_t i = 0; i < n; i++) {
    const char* name = h[i].key_ptr;
    size_t nl = h[i].key_length;
    if (nl == 0) continue;  // Go: never an attribute's header, never owned
    if (allot_owned(p, name, nl)) return ALLOT_WFIND_OWNED;
    for (size_t j = 0; j < p->n_headers; j++) {
      const allot_wplan_header* ph = &p->headers[j];
      allot_buffer* v = &c->vals[ph->slot];
      if (ph->name_length == nl && v->length == 0 && memcmp(ph->name, name, nl) == 0) {
        *v = (allot_buffer){h[i].value_ptr, h[i].value_length};
      }
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < p->n_slots; i++) {
    uint64_t l = c->vals[i].length;
    do {  // binary.AppendUvarint
      if (k == ALLOT_WCACHE_MAX_KEY) return ALLOT_WFIND_TOO_LONG;
      c->key[k++] = (char)(l >= 0x80 ? (l & 0x7f) | 0x80 : l);
      l >>= 7;
    } while (l != 0);
    if (c->vals[i].length > ALLOT_WCACHE_MAX_KEY - k) return ALLOT_WFIND_TOO_LONG;
    if (c->vals[i].length > 0) memcpy(c->key + k, c->vals[i].ptr, c->vals[i].length);
    k += c->vals[i].length;
  }
  c->key_length = k;
  c->key_hash = allot_wkey_hash(c->key, k);
  *out = allot_wcache_get(c, c->key_hash, c->key, k);
  return *out != NULL ? ALLOT_WFIND_HIT : ALLOT_WFIND_MISS;
}

bool allot_wcache_put(allot_wcache* c, const char* key, size_t key_length, const uint32_t* items, size_t n_items,
                      bool seen) {
  if (c->skip > 0 && !seen) return false;
  return allot_wcache_insert(c, allot_wkey_hash(key, key_length), key, key_length, items, n_items);
}

bool allot_wcache_insert(allot_wcache* c, uint64_t hash, const char* key, size_t key_length, const uint32_t* items,
                         size_t n_items) {
  if (key_length > ALLOT_WCACHE_MAX_KEY || n_items > 0xffff) return false;
  const size_t size = allot_wentry_size(n_items, key_length);
  if (size > c->max_bytes || !allot_wcache_ready(c)) return false;
  const size_t base = (hash & c->mask) * ALLOT_WAYS;
  allot_wslot* set = c->slots + base;
  int w = -1;
  for (int i = 0; i < ALLOT_WAYS; i++) {
    if (set[i].e != NULL && set[i].hash == hash) {
      w = i;
      break;
    }
  }
  if (w >= 0 && set[w].gen == c->gen && allot_same(set[w].e, key, key_length, items, n_items)) {
    set[w].used = ++c->tick;  // Go served what C holds (a request C sent it): nothing to copy
    c->skip = 0;              // and if C skipped its look, it would have hit: look again
    return true;
  }
  allot_wentry* e = c->a.alloc(size);
  if (e == NULL) return false;
  *e = (allot_wentry){.older = c->newest, .newer = ALLOT_WNONE, .n_items = (uint16_t)n_items,
                      .key_length = (uint16_t)key_length};
  if (n_items > 0) memcpy((uint32_t*)allot_wentry_items(e), items, n_items * sizeof(uint32_t));
  if (key_length > 0) memcpy((char*)allot_wentry_key(e), key, key_length);
  if (w < 0) {
    for (int i = 0; i < ALLOT_WAYS; i++) {
      if (set[i].e == NULL) {
        w = i;
        break;
      }
      if (w < 0 || c->tick - set[i].used > c->tick - set[w].used) w = i;
    }
  }
  const uint32_t way = (uint32_t)(base + w);
  if (set[w].e != NULL) allot_drop(c, way);
  e->older = c->newest;  // the drop may have changed it
  set[w] = (allot_wslot){hash, e, ++c->tick, c->gen};
  if (c->newest != ALLOT_WNONE) c->slots[c->newest].e->newer = way; else c->oldest = way;
  c->newest = way;
  c->n++;
  c->bytes += size;
  while (c->n > c->max_entries || c->bytes > c->max_bytes) allot_drop(c, c->oldest);
  return true;
}

void allot_wcache_take_all(allot_wcache* c, uint64_t* out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = allot_wcache_take(c, i);
}

void allot_wrender_free(allot_wrender* r) {
  if (r == NULL) return;
  const allot_allocator a = r->a;
  if (r->exps != NULL) {
    for (uint32_t i = 0; i < r->n_exps; i++) {
      allot_wexp* x = &r->exps[i];
      a.free((void*)x->header.ptr);
      for (uint32_t v = 0; v < x->n_vars; v++) {
        if (x->values != NULL) a.free((void*)x->values[v].ptr);
        if (x->members != NULL) a.free((void*)x->members[v].ptr);
      }
      a.free(x->values);
      a.free(x->members);
      a.free(x->stats);
      a.free(x->outcomes);
    }
    a.free(r->exps);
  }
  a.free((void*)r->dictionary.ptr);
  a.free((void*)r->version_header.ptr);
  a.free((void*)r->version.ptr);
  a.free(r);
}

allot_wrender* allot_wrender_new(uint32_t n_exps, bool per_experiment, bool exposure, allot_buffer dictionary,
                                 allot_buffer version_header, allot_buffer version, uint32_t evaluated, uint32_t hits,
                                 uintptr_t envoy_config, uint32_t unrecorded, bool has_unrecorded,
                                 const allot_allocator* alloc) {
  const allot_allocator* a = allot_or_default(alloc);
  if (n_exps > 0xffff) return NULL;
  allot_wrender* r = a->alloc(sizeof(allot_wrender));
  if (r == NULL) return NULL;
  memset(r, 0, sizeof(*r));
  r->a = *a;
  r->per_experiment = per_experiment;
  r->exposure = exposure;
  r->evaluated = evaluated;
  r->hits = hits;
  r->envoy_config = envoy_config;
  r->unrecorded = unrecorded;
  r->has_unrecorded = has_unrecorded;
  if (n_exps > 0) {
    r->exps = a->alloc(n_exps * sizeof(allot_wexp));
    if (r->exps == NULL) goto fail;
    memset(r->exps, 0, n_exps * sizeof(allot_wexp));
    r->n_exps = n_exps;
  }
  if (!allot_copy(a, dictionary, &r->dictionary) || !allot_copy(a, version_header, &r->version_header) ||
      !allot_copy(a, version, &r->version)) {
    goto fail;
  }
  return r;
fail:
  allot_wrender_free(r);
  return NULL;
}

bool allot_wrender_set(allot_wrender* r, uint32_t i, allot_buffer header, uint32_t n_vars, const allot_buffer* values,
                       const allot_buffer* members, const uint32_t* stats, const size_t* outcomes) {
  if (i >= r->n_exps || r->exps[i].n_vars != 0 || n_vars == 0 || n_vars > 0xffff) return false;
  const allot_allocator* a = &r->a;
  allot_wexp* x = &r->exps[i];
  size_t longest = 0;
  for (uint32_t v = 0; v < n_vars; v++) {
    if (members[v].length > longest) longest = members[v].length;
  }
  if (longest > ALLOT_WRENDER_MAX_DICTIONARY - r->max_dictionary) return false;
  x->values = a->alloc(n_vars * sizeof(allot_buffer));
  x->members = a->alloc(n_vars * sizeof(allot_buffer));
  x->stats = a->alloc(n_vars * sizeof(uint32_t));
  if (outcomes != NULL) x->outcomes = a->alloc(n_vars * ALLOT_OUTCOME_IDS * sizeof(size_t));
  if (x->values == NULL || x->members == NULL || x->stats == NULL || (outcomes != NULL && x->outcomes == NULL)) {
    goto fail;
  }
  if (outcomes != NULL) memcpy(x->outcomes, outcomes, n_vars * ALLOT_OUTCOME_IDS * sizeof(size_t));
  memset(x->values, 0, n_vars * sizeof(allot_buffer));
  memset(x->members, 0, n_vars * sizeof(allot_buffer));
  x->n_vars = n_vars;  // from here on, free walks the variations
  memcpy(x->stats, stats, n_vars * sizeof(uint32_t));
  if (!allot_copy(a, header, &x->header)) goto fail;
  for (uint32_t v = 0; v < n_vars; v++) {
    if (!allot_copy(a, values[v], &x->values[v]) || !allot_copy(a, members[v], &x->members[v])) goto fail;
  }
  r->max_dictionary += longest;
  if (outcomes != NULL) r->n_observed++;
  return true;
fail:  // leave the experiment unset; the table is freed whole
  a->free((void*)x->header.ptr);
  for (uint32_t v = 0; v < x->n_vars; v++) {
    a->free((void*)x->values[v].ptr);
    a->free((void*)x->members[v].ptr);
  }
  a->free(x->values);
  a->free(x->members);
  a->free(x->stats);
  a->free(x->outcomes);
  memset(x, 0, sizeof(*x));
  return false;
}

void allot_wconfig_free(allot_wconfig* w) {
  if (w == NULL) return;
  const allot_allocator a = w->a;
  if (w->workers != NULL) {
    for (size_t i = 0; i < w->n_workers; i++) allot_wcache_free(w->workers[i]);
    a.free(w->workers);
  }
  allot_wplan_free(w->plan);
  allot_wrender_free(w->render);
  a.free((void*)w->exposure_key.ptr);
  a.free((void*)w->answer_prefix.ptr);
  a.free(w);
}

bool allot_wconfig_set_answer_prefix(allot_wconfig* w, allot_buffer prefix) {
  w->a.free((void*)w->answer_prefix.ptr);
  w->answer_prefix = (allot_buffer){NULL, 0};
  return allot_copy(&w->a, prefix, &w->answer_prefix);
}

bool allot_answered(const allot_header* h, size_t n, allot_buffer prefix) {
  for (size_t i = 0; i < n; i++) {
    if (h[i].key_length == 5 && memcmp(h[i].key_ptr, ":path", 5) == 0) {
      return h[i].value_length >= prefix.length && memcmp(h[i].value_ptr, prefix.ptr, prefix.length) == 0;
    }
  }
  return false;
}

allot_wconfig* allot_wconfig_new(allot_wplan* plan, allot_wrender* render, size_t n_workers, size_t max_entries,
                                 size_t max_bytes, size_t n_counters, allot_buffer exposure_key,
                                 const allot_allocator* alloc) {
  const allot_allocator* a = allot_or_default(alloc);
  allot_wconfig* w = a->alloc(sizeof(allot_wconfig));
  if (w == NULL) {
    allot_wplan_free(plan);
    allot_wrender_free(render);
    return NULL;
  }
  memset(w, 0, sizeof(*w));
  w->a = *a;
  w->plan = plan;
  w->render = render;
  if (plan == NULL && render == NULL) return w;
  if (plan == NULL || render == NULL) goto fail;
  for (uint32_t i = 0; i < render->n_exps; i++) {
    if (render->exps[i].n_vars == 0) goto fail;  // an experiment never set
  }
  if (n_workers > ALLOT_WCONFIG_MAX_WORKERS || !allot_copy(a, exposure_key, &w->exposure_key)) goto fail;
  if (n_workers > 0) {
    w->workers = a->alloc(n_workers * sizeof(allot_wcache*));
    if (w->workers == NULL) goto fail;
    memset(w->workers, 0, n_workers * sizeof(allot_wcache*));
    w->n_workers = n_workers;
    for (size_t i = 0; i < n_workers; i++) {
      w->workers[i] = allot_wcache_new(plan, max_entries, max_bytes, n_counters, render->max_dictionary,
                                       (size_t)render->n_observed * ALLOT_OUTCOME_IDS, a);
      if (w->workers[i] == NULL) goto fail;
    }
  }
  return w;
fail:
  allot_wconfig_free(w);
  return NULL;
}
