// The warm path's cache in C (docs/perf/native-warm-path.md): per worker
// and configuration, each unit's assignment, keyed exactly as plugin.Plugin
// keys its own cache, and how to render it (allot_wrender), so that a warm
// request can be served without entering Go.
//
// A plan (allot_wplan, one per configuration, read-only once made) says
// which request headers fill which of the key's value slots, the constant
// slots' values and the header names the filter owns. A cache
// (allot_wcache, one per worker) holds the entries, the worker's scratch
// (headers, values, key) and its pending counts. Only its worker's thread
// touches a cache, so nothing here locks; the pending counts are the one
// exception (Go's flush takes them from another thread) and are atomic.
//
// Bounds: max_entries entries and max_bytes bytes of entries (each entry's
// bytes include its fixed overhead, ALLOT_WENTRY_OVERHEAD); an entry larger
// than max_bytes is refused. A cache is its struct until its first insert,
// which allocates, on the worker's thread, its slot table (sized from both
// bounds: allot_wcache_ways) and the worker's scratch: a worker that serves
// nothing costs a cache line or four. A lookup allocates nothing; an insert
// allocates once, or not at all when the way already holds the same entry.
// Every allocation goes through the allocator the cache was made with
// (tests count them).

#ifndef ALLOT_WCACHE_H
#define ALLOT_WCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"

// ALLOT_WCACHE_MAX_HEADERS is the most request headers the warm path reads
// (Envoy's default max_headers_count is 100); a request with more goes to Go.
#define ALLOT_WCACHE_MAX_HEADERS 128
// ALLOT_WCACHE_MAX_KEY is the longest key the warm path builds; a request
// whose key is longer goes to Go, and such a key is never inserted.
#define ALLOT_WCACHE_MAX_KEY 8192
// ALLOT_WPLAN_MAX_SLOTS bounds a plan's value slots.
#define ALLOT_WPLAN_MAX_SLOTS 1024
// ALLOT_WCONFIG_MAX_WORKERS bounds the workers a configuration keeps
// caches for; a worker of a higher index goes to Go.
#define ALLOT_WCONFIG_MAX_WORKERS 1024
// ALLOT_WCACHE_MAX_ENTRIES bounds a cache's entries (the configuration's
// cacheSize is an int32).
#define ALLOT_WCACHE_MAX_ENTRIES (1u << 24)
// ALLOT_WCACHE_MAX_COUNTERS bounds a cache's pending counts (a
// configuration's counters: its fixed ones and one per variation; at most
// 0xffff experiments of 0xffff variations is more than any configuration
// the engine compiles).
#define ALLOT_WCACHE_MAX_COUNTERS (1u << 24)

typedef struct {
  void* (*alloc)(size_t);
  void (*free)(void*);
} allot_allocator;

typedef struct {
  const char* name;
  size_t name_length;
  uint32_t slot;
} allot_wplan_header;

typedef struct {
  size_t n_slots;
  allot_wplan_header* headers;  // the headers read, in no particular order
  size_t n_headers;
  allot_buffer* consts;  // n_slots; a header slot's is empty
  allot_buffer prefix, dictionary, version;  // lower-case
  allot_allocator a;
} allot_wplan;

// ALLOT_WNONE is no way (an end of the insertion list).
#define ALLOT_WNONE UINT32_MAX

// allot_wentry is one cached result, in one allocation: these 12 bytes,
// then its items (allot_wentry_items) — the assignments, experiment << 16
// | variation, in the dictionary's order, as plugin.cache keeps them: a
// hit renders the headers from the configuration's allot_wrender — then
// the key (allot_wentry_key). Its hash and generation are in its way of
// the slot table, its size is derived (allot_wentry_size), and the
// insertion list links ways, not pointers: so an entry costs 4 bytes more
// than Go's record of 8 (filter/plugin/cache.go).
typedef struct {
  uint32_t older, newer;  // the ways of the entries inserted before and after it; ALLOT_WNONE: none
  uint16_t n_items, key_length;
} allot_wentry;

#define ALLOT_WENTRY_OVERHEAD (sizeof(allot_wentry))

static inline const uint32_t* allot_wentry_items(const allot_wentry* e) { return (const uint32_t*)(e + 1); }

static inline const char* allot_wentry_key(const allot_wentry* e) {
  return (const char*)(allot_wentry_items(e) + e->n_items);
}

// allot_wentry_size is the bytes an entry of n_items items and a key of
// key_length bytes allocates and counts against max_bytes.
static inline size_t allot_wentry_size(size_t n_items, size_t key_length) {
  return ALLOT_WENTRY_OVERHEAD + n_items * sizeof(uint32_t) + key_length;
}

// allot_wexp is what a hit renders for one experiment: its header, each
// variation's header value, dictionary member (", key=\"value\"") and
// counter position.
typedef struct {
  allot_buffer header;
  uint32_t n_vars;
  allot_buffer* values;
  allot_buffer* members;
  uint32_t* stats;
  size_t* outcomes;  // ALLOT_OUTCOME_IDS stat ids per variation; NULL: not observed
} allot_wexp;

// allot_wrender is how a configuration's hit renders an entry, as the
// plugin adds its headers (addBatch): each assignment's header when
// per_experiment, the dictionary (when not empty), the version header
// (when the version is not empty); the exposure record (the dictionary,
// when exposure and it is not empty); the counts (evaluated, hits, each
// assignment's variation); the observed assignments' outcome stat ids, left
// in the stream's state (allot_stream_observe, with envoy_config; if that
// fails, the unrecorded count when has_unrecorded).
typedef struct {
  uint32_t n_exps;
  allot_wexp* exps;
  bool per_experiment, exposure;
  allot_buffer dictionary, version_header, version;
  uint32_t evaluated, hits;
  size_t max_dictionary;  // the longest dictionary value, its leading ", " included
  uint32_t n_observed;    // experiments with outcomes
  uintptr_t envoy_config;
  uint32_t unrecorded;
  bool has_unrecorded;
  allot_allocator a;
} allot_wrender;

// ALLOT_WRENDER_MAX_DICTIONARY bounds a configuration's longest possible
// dictionary value: a configuration whose dictionary could be longer is
// served by Go (allot_wrender_new refuses it).
#define ALLOT_WRENDER_MAX_DICTIONARY (64 * 1024)

// allot_wslot is one way of a cache's slot table.
typedef struct {
  uint64_t hash;
  allot_wentry* e;  // NULL: free
  // used is the tick of the way's last use. The tick wraps after 2^32
  // lookups and inserts: ages are compared as unsigned differences, which
  // the wrap keeps right, except that a way idle for more than 2^32 ticks
  // looks recent — harmless (it is only replaced later than it might be).
  uint32_t used;
  uint32_t gen;  // the cache's generation when its entry was inserted
} allot_wslot;

// allot_wcache is one worker's cache. It is allocated 64-byte aligned and
// is a whole number of cache lines, and so are its pending counts: the
// workers' caches are made one after another, and every request writes
// its cache (the tick, the key) and every hit its pending counts, so no
// two workers share a line.
typedef struct {
  _Alignas(64) const allot_wplan* plan;
  allot_allocator a;
  allot_wslot* slots;  // NULL until the first insert
  uint64_t mask;       // sets - 1
  uint32_t tick, gen;
  size_t n, bytes, max_entries, max_bytes;
  uint32_t oldest, newest;  // ways; ALLOT_WNONE: empty
  // The worker's scratch, allocated with the slot table: the request's
  // headers, its slots' values, the key, a hit's dictionary value
  // (dict_cap bytes).
  allot_header* hdrs;
  allot_buffer* vals;
  char* key;
  char* dict;
  size_t dict_cap;
  size_t* obs;  // a hit's observed stat ids (obs_cap of them)
  size_t obs_cap;
  size_t key_length;
  uint64_t key_hash;
  // pending counts, by counter position (n_counters), taken by Go's flush
  // (any thread: published with the table, read with acquire; NULL: none
  // yet).
  uint64_t* pending;
  size_t n_counters;
  // The worker's recent looks (allot_wcache_should_look): looks and hits
  // in the current window, and skip, the requests still to hand Go
  // without a look because the last window mostly missed.
  uint32_t looks, hits, skip;
} allot_wcache;

// A worker whose looks mostly miss stops looking for a while: a look that
// misses costs the header read and the key (about 1 µs) on top of Go's
// path, so a worker whose units are all new (a cold cache, one request
// per user) would pay it for nothing. When fewer than
// ALLOT_WLOOK_MIN_HITS of a window of ALLOT_WLOOK_WINDOW looks hit, the
// next ALLOT_WLOOK_SKIP requests go to Go unlooked: one look in 16.
// Meanwhile Go inserts only units its own cache held (seen before:
// allot_wcache_put), so a new unit costs no insert and a repeating one is
// cached as soon as it repeats; Go's insert of an entry C already holds (a
// request C would have served) ends the skip, if Go's cache held it too (a
// unit Go has evicted is refused before C looks, and ends nothing), and a
// window that hits keeps the looks going. Only which path serves a
// request changes, never its headers or counts.
#define ALLOT_WLOOK_WINDOW 64
#define ALLOT_WLOOK_MIN_HITS 8
#define ALLOT_WLOOK_SKIP 960

// allot_wcache_should_look reports whether the worker's request should
// look in its cache (false: hand it to Go at once).
static inline bool allot_wcache_should_look(allot_wcache* c) {
  if (c->skip == 0) return true;
  c->skip--;
  return false;
}

// allot_wcache_looked records a look's outcome, and starts a skip at the
// end of a window with too few hits.
static inline void allot_wcache_looked(allot_wcache* c, bool hit) {
  c->looks++;
  c->hits += hit;
  if (c->looks < ALLOT_WLOOK_WINDOW) return;
  if (c->hits < ALLOT_WLOOK_MIN_HITS) c->skip = ALLOT_WLOOK_SKIP;
  c->looks = c->hits = 0;
}

// Results of allot_wcache_find.
enum {
  ALLOT_WFIND_HIT = 0,
  ALLOT_WFIND_MISS = 1,       // the key is built (c->key) and not cached
  ALLOT_WFIND_OWNED = 2,      // a header the filter owns, or a name it cannot fold: Go's
  ALLOT_WFIND_TOO_MANY = 3,   // more than ALLOT_WCACHE_MAX_HEADERS headers
  ALLOT_WFIND_TOO_LONG = 4,   // the key would exceed ALLOT_WCACHE_MAX_KEY
};

// allot_wplan_new copies a plan: n_slots value slots, the headers that fill
// them (each slot < n_slots), the constant slots' values (NULL: none) and
// the owned names (lower-case). NULL on no memory or a bound exceeded.
allot_wplan* allot_wplan_new(size_t n_slots, const allot_wplan_header* headers, size_t n_headers,
                             const allot_buffer* consts, allot_buffer prefix, allot_buffer dictionary,
                             allot_buffer version, const allot_allocator* a);

void allot_wplan_free(allot_wplan* p);

// allot_wcache_new makes a worker's cache for plan p (which must outlive
// it), with n_counters pending counts and dict_cap bytes of dictionary
// scratch; it allocates only the cache's struct. NULL on no memory or
// bounds out of range (max_entries 1..ALLOT_WCACHE_MAX_ENTRIES, max_bytes
// > 0, n_counters ≤ ALLOT_WCACHE_MAX_COUNTERS).
allot_wcache* allot_wcache_new(const allot_wplan* p, size_t max_entries, size_t max_bytes, size_t n_counters,
                               size_t dict_cap, size_t obs_cap, const allot_allocator* a);

// allot_wcache_free frees the cache and every entry.
void allot_wcache_free(allot_wcache* c);

// allot_wcache_bump starts a new generation: no entry inserted before is
// found again (each is freed when next met or evicted in turn).
void allot_wcache_bump(allot_wcache* c);

// allot_wkey_hash is FNV-1a 64, plugin.hashBytes.
uint64_t allot_wkey_hash(const char* b, size_t n);

// allot_wcache_ways is the number of ways of the slot table of a cache of
// these bounds: as many as the bounds let it hold entries (max_entries, and
// max_bytes / (ALLOT_WENTRY_OVERHEAD + 1), an entry's least size), in a
// power of two of 4-way sets.
size_t allot_wcache_ways(size_t max_entries, size_t max_bytes);

// allot_wcache_find builds the key of a request's headers h (n of them;
// h may be c->hdrs) into c->key and looks it up; on a hit *out is the entry,
// valid until the next insert. A cache nothing was ever inserted into
// reads nothing: a miss, with no key built.
int allot_wcache_find(allot_wcache* c, const allot_header* h, size_t n, const allot_wentry** out);

// allot_wcache_get looks a key up; NULL if absent.
const allot_wentry* allot_wcache_get(allot_wcache* c, uint64_t hash, const char* key, size_t key_length);

// allot_wcache_insert copies an entry in: its key and n_items items. The
// first insert allocates the slot table and the worker's scratch. When
// the way of the same hash holds the same key and items, it is only
// marked used (nothing allocated); else the entry replaces that way's, or
// the least recently used of its set, and the oldest entries are evicted
// until the bounds hold. False if the entry is larger than max_bytes, its
// key longer than ALLOT_WCACHE_MAX_KEY, more than 0xffff items, or there is
// no memory (then nothing changed).
bool allot_wcache_insert(allot_wcache* c, uint64_t hash, const char* key, size_t key_length, const uint32_t* items,
                         size_t n_items);

// allot_wcache_put is allot_wcache_insert with the key's hash computed
// here, so that Go's insert is one cgo call, of a result Go served: seen
// says whether Go's own cache held it. While the cache skips its looks
// (allot_wcache_should_look), a result not seen is refused (false): a
// worker whose every request is a new unit inserts nothing.
bool allot_wcache_put(allot_wcache* c, const char* key, size_t key_length, const uint32_t* items, size_t n_items,
                      bool seen);

// allot_wcache_take_all moves the n first pending counts into out (any
// thread).
void allot_wcache_take_all(allot_wcache* c, uint64_t* out, size_t n);

// allot_wconfig is the C side of one configuration, whose address is its
// handle (dynmod.Stateless aside: malloc aligns it). plan NULL: the warm
// path is off for it and every request goes to Go; else workers[i] is
// worker i's cache. Made in config-new, freed in config-destroy (on
// whichever thread drops Envoy's last reference, when no stream uses it;
// Go's module lock orders it against the counters' flush); a worker reads
// it and touches its own cache only.
typedef struct {
  allot_wplan* plan;
  allot_wrender* render;
  allot_wcache** workers;
  size_t n_workers;
  allot_buffer exposure_key;  // the exposure record's filter state
  // answer_prefix is the path prefix of the requests the configuration
  // answers itself (plugin.Config.AnswerPrefix; empty: none), which the
  // warm path never serves: Go answers them.
  allot_buffer answer_prefix;
  allot_allocator a;
} allot_wconfig;

// allot_wconfig_set_answer_prefix copies the path prefix of the requests
// the configuration answers itself into its C side (at configuration
// time, before any stream sees its handle), replacing any; false on no
// memory (then it has none).
bool allot_wconfig_set_answer_prefix(allot_wconfig* w, allot_buffer prefix);

// allot_answered reports whether a request's headers h (n of them) have a
// :path that begins with prefix (not empty).
bool allot_answered(const allot_header* h, size_t n, allot_buffer prefix);

// allot_wrender_new makes a render table of n_exps experiments, each set
// with allot_wrender_set; NULL on no memory or n_exps over 0xffff.
allot_wrender* allot_wrender_new(uint32_t n_exps, bool per_experiment, bool exposure, allot_buffer dictionary,
                                 allot_buffer version_header, allot_buffer version, uint32_t evaluated, uint32_t hits,
                                 uintptr_t envoy_config, uint32_t unrecorded, bool has_unrecorded,
                                 const allot_allocator* a);

// allot_wrender_set copies experiment i's header and its n_vars
// variations' values, dictionary members, counter positions and outcome
// stat ids (NULL: not observed; else ALLOT_OUTCOME_IDS each); false on
// no memory, i out of range, a second set, or a longest dictionary over
// ALLOT_WRENDER_MAX_DICTIONARY.
bool allot_wrender_set(allot_wrender* r, uint32_t i, allot_buffer header, uint32_t n_vars, const allot_buffer* values,
                       const allot_buffer* members, const uint32_t* stats, const size_t* outcomes);

void allot_wrender_free(allot_wrender* r);

// allot_wconfig_new makes a configuration's C side, taking plan and
// render (both NULL: off; freed with it, or here if it cannot be made):
// n_workers caches of the given bounds, with n_counters pending counts
// each. NULL on no memory or bounds out of range.
allot_wconfig* allot_wconfig_new(allot_wplan* plan, allot_wrender* render, size_t n_workers, size_t max_entries,
                                 size_t max_bytes, size_t n_counters, allot_buffer exposure_key,
                                 const allot_allocator* a);

// allot_wconfig_free frees a configuration's C side: caches, plan, all.
void allot_wconfig_free(allot_wconfig* w);

// allot_set_warm_handles says whether the Handler's configuration handles
// are allot_wconfig addresses (wserve.c).
void allot_set_warm_handles(bool on);

// allot_warm_observed is the number of observed experiments of the
// configuration of handle h (even), for which its streams keep room in
// their own allocation (allot_stream_new); 0 unless handles are
// allot_wconfig addresses and the configuration has a render table.
size_t allot_warm_observed(uintptr_t h);

// allot_warm_serve serves a request of stream value m (a handle, odd, or
// an allot_stream) from its worker's cache, as the plugin would; false if
// it did not (nothing counted, no exposure record; headers possibly added,
// which Go removes as forged), and at once unless handles are allot_wconfig
// addresses and m is not 0 (wserve.c).
bool allot_warm_serve(uintptr_t f, uintptr_t m);

// allot_wcache_count adds n to pending count i (the worker's thread, after
// its first insert).
static inline void allot_wcache_count(allot_wcache* c, size_t i, uint64_t n) {
  if (i < c->n_counters && c->pending != NULL) __atomic_fetch_add(&c->pending[i], n, __ATOMIC_RELAXED);
}

// allot_wcache_take returns pending count i and resets it (any thread).
static inline uint64_t allot_wcache_take(allot_wcache* c, size_t i) {
  uint64_t* p = __atomic_load_n(&c->pending, __ATOMIC_ACQUIRE);
  return i < c->n_counters && p != NULL ? __atomic_exchange_n(&p[i], 0, __ATOMIC_RELAXED) : 0;
}

#endif
