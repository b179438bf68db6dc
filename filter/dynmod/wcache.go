package dynmod

/*
#include <stdlib.h>
#include <string.h>

#include "wcache.h"

int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t f, uintptr_t m, bool eos);

#cgo noescape allot_wcache_put
#cgo nocallback allot_wcache_put
#cgo nocallback allot_wcache_take
#cgo nocallback allot_wcache_bump
#cgo nocallback allot_set_warm_handles
#cgo noescape allot_wcache_take_all
#cgo nocallback allot_wcache_take_all

// The allocator the tests count with (allocatorCounting): every
// allocation and free of a cache made with it, the bytes it holds (each
// block's size kept in a 16-byte header before it), and, when budget is
// not negative, a failure once budget allocations have been made.
static size_t allot_counted_allocs, allot_counted_frees, allot_counted_live;
static long allot_alloc_budget = -1;
static void* allot_counting_alloc(size_t n) {
  if (allot_alloc_budget == 0) return NULL;
  if (allot_alloc_budget > 0) allot_alloc_budget--;
  size_t* b = malloc(n + 16);
  if (b == NULL) return NULL;
  b[0] = n;
  allot_counted_allocs++;
  allot_counted_live += n;
  return (char*)b + 16;
}
static void allot_counting_free(void* p) {
  if (p == NULL) return;
  size_t* b = (size_t*)((char*)p - 16);
  allot_counted_frees++;
  allot_counted_live -= b[0];
  free(b);
}
static size_t allot_counting_live(void) { return allot_counted_live; }
static const allot_allocator allot_counting = {allot_counting_alloc, allot_counting_free};
static const allot_allocator* allot_counting_allocator(void) { return &allot_counting; }
static void allot_counting_reset(long budget) {
  allot_counted_allocs = allot_counted_frees = 0;
  allot_alloc_budget = budget;
}
static size_t allot_counting_allocs(void) { return allot_counted_allocs; }
static size_t allot_counting_frees(void) { return allot_counted_frees; }
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// The warm path's bounds (wcache.h).
const (
	// WarmMaxHeaders is the most request headers the warm path reads; a
	// request with more goes to Go.
	WarmMaxHeaders = C.ALLOT_WCACHE_MAX_HEADERS
	// WarmMaxKey is the longest cache key the warm path builds or keeps.
	WarmMaxKey = C.ALLOT_WCACHE_MAX_KEY
	// WarmMaxSlots bounds a plan's value slots and its headers.
	WarmMaxSlots = C.ALLOT_WPLAN_MAX_SLOTS
	// WarmMaxEntries bounds a cache's entries.
	WarmMaxEntries = C.ALLOT_WCACHE_MAX_ENTRIES
	// WarmMaxCounters bounds a cache's pending counts (a configuration's
	// counters).
	WarmMaxCounters = C.ALLOT_WCACHE_MAX_COUNTERS
	// WarmEntryOverhead is what an entry costs against its cache's byte
	// bound besides its key and its assignments (4 bytes each).
	WarmEntryOverhead = C.ALLOT_WENTRY_OVERHEAD
)

// Results of a warm lookup (allot_wcache_find).
const (
	warmHit     = C.ALLOT_WFIND_HIT
	warmMiss    = C.ALLOT_WFIND_MISS
	warmOwned   = C.ALLOT_WFIND_OWNED
	warmTooMany = C.ALLOT_WFIND_TOO_MANY
	warmTooLong = C.ALLOT_WFIND_TOO_LONG
)

// WarmHeader is a request header whose value fills one of a warm plan's
// value slots.
type WarmHeader struct {
	Name string
	Slot int
}

// WarmPlan is, for one configuration, what the warm path needs to build a
// request's cache key in C as the plugin builds it in Go: the value slots,
// the headers that fill them, the constant slots' values, and the header
// names the filter owns (a request carrying one goes to Go). Read-only once
// made; Free it after every cache made from it.
type WarmPlan struct{ p *C.allot_wplan }

// NewWarmPlan makes a plan of slots value slots filled by headers (a
// header's first non-empty value fills its slot), consts the constant
// slots' values (nil or slots long; "" for a header slot), and the owned
// names: the assignment header prefix, the dictionary and the version
// header, ASCII, compared in any case. An invalid plan is an error naming
// the field.
func NewWarmPlan(slots int, headers []WarmHeader, consts []string, prefix, dictionary, version string) (*WarmPlan, error) {
	return newWarmPlan(slots, headers, consts, prefix, dictionary, version, nil)
}

func newWarmPlan(slots int, headers []WarmHeader, consts []string, prefix, dictionary, version string, a *C.allot_allocator) (*WarmPlan, error) {
	var errs []error
	if slots < 0 || slots > WarmMaxSlots {
		errs = append(errs, fmt.Errorf("slots: %d, want 0 to %d", slots, WarmMaxSlots))
	}
	if len(headers) > WarmMaxSlots {
		errs = append(errs, fmt.Errorf("headers: %d, want at most %d", len(headers), WarmMaxSlots))
	}
	for i, h := range headers {
		if h.Slot < 0 || h.Slot >= slots {
			errs = append(errs, fmt.Errorf("headers[%d].slot: %d, want 0 to %d", i, h.Slot, slots-1))
		}
		if h.Name == "" {
			errs = append(errs, fmt.Errorf("headers[%d].name: empty", i))
		}
	}
	if consts != nil && len(consts) != slots {
		errs = append(errs, fmt.Errorf("consts: %d values, want %d (one per slot)", len(consts), slots))
	}
	for _, n := range []struct{ field, name string }{{"prefix", prefix}, {"dictionary", dictionary}, {"version", version}} {
		if n.name == "" || !isASCII(n.name) {
			errs = append(errs, fmt.Errorf("%s: %q, want a non-empty ASCII header name", n.field, n.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("warm plan: %w", err)
	}
	// Everything handed to C lives in C memory for the call: the headers'
	// array holds pointers, which cgo does not let Go memory hold.
	var mem cArena
	defer mem.free()
	ch := (*C.allot_wplan_header)(mem.alloc(len(headers) * C.sizeof_allot_wplan_header))
	hs := unsafe.Slice(ch, len(headers))
	for i, h := range headers {
		hs[i] = C.allot_wplan_header{name: mem.str(h.Name), name_length: C.size_t(len(h.Name)), slot: C.uint32_t(h.Slot)}
	}
	var cc *C.allot_buffer
	if consts != nil {
		cc = (*C.allot_buffer)(mem.alloc(slots * C.sizeof_allot_buffer))
		cs := unsafe.Slice(cc, slots)
		for i, v := range consts {
			cs[i] = mem.buf(v)
		}
	}
	p := C.allot_wplan_new(C.size_t(slots), ch, C.size_t(len(headers)), cc, mem.buf(strings.ToLower(prefix)),
		mem.buf(strings.ToLower(dictionary)), mem.buf(strings.ToLower(version)), a)
	if p == nil {
		return nil, errors.New("warm plan: no memory")
	}
	return &WarmPlan{p: p}, nil
}

// Free releases the plan.
func (p *WarmPlan) Free() {
	C.allot_wplan_free(p.p)
	p.p = nil
}

// WarmCache is one worker's warm cache for one configuration: used only on
// that worker's thread (Take excepted), freed with the configuration.
type WarmCache struct{ c *C.allot_wcache }

// NewWarmCache makes a cache for plan p (which must outlive it) of at most
// maxEntries entries and maxBytes bytes of entries, with counters pending
// counts.
func NewWarmCache(p *WarmPlan, maxEntries, maxBytes, counters int) (*WarmCache, error) {
	return newWarmCache(p, maxEntries, maxBytes, counters, nil)
}

func newWarmCache(p *WarmPlan, maxEntries, maxBytes, counters int, a *C.allot_allocator) (*WarmCache, error) {
	if err := errors.Join(cacheProblems(maxEntries, maxBytes, counters)...); err != nil {
		return nil, fmt.Errorf("warm cache: %w", err)
	}
	c := C.allot_wcache_new(p.p, C.size_t(maxEntries), C.size_t(maxBytes), C.size_t(counters), 0, 0, a)
	if c == nil {
		return nil, errors.New("warm cache: no memory")
	}
	return &WarmCache{c: c}, nil
}

// cacheProblems are what is wrong with a cache's bounds, each naming its
// field.
func cacheProblems(maxEntries, maxBytes, counters int) []error {
	var errs []error
	if maxEntries < 1 || maxEntries > WarmMaxEntries {
		errs = append(errs, fmt.Errorf("maxEntries: %d, want 1 to %d", maxEntries, WarmMaxEntries))
	}
	if maxBytes < 1 {
		errs = append(errs, fmt.Errorf("maxBytes: %d, want at least 1", maxBytes))
	}
	if counters < 0 || counters > WarmMaxCounters {
		errs = append(errs, fmt.Errorf("counters: %d, want 0 to %d", counters, WarmMaxCounters))
	}
	return errs
}

// Free releases the cache and its entries.
func (c *WarmCache) Free() {
	C.allot_wcache_free(c.c)
	c.c = nil
}

// Bump starts a new generation: no entry inserted before is served again.
func (c *WarmCache) Bump() { C.allot_wcache_bump(c.c) }

// Insert caches what a request with key got: its assignments, each
// experiment << 16 | variation, in the dictionary's order. False if the
// cache refused it (too large for its bounds) or had no memory.
func (c *WarmCache) Insert(key []byte, items []uint32) bool { return c.Offer(key, items, true) }

// Offer is Insert of what Go served a request, seen saying whether Go's
// own cache held it (a unit seen before): while the worker skips its
// looks (its recent looks mostly missed, wcache.h), a new unit's result is
// not cached, so a worker whose every request is a new unit pays no
// insert for a cache nothing reads; a seen unit's is, and ends the skip
// if C held it already. False if not cached.
func (c *WarmCache) Offer(key []byte, items []uint32, seen bool) bool {
	if !seen && c.c.skip > 0 { // allot_wcache_put's own refusal, without the cgo call (the same thread)
		return false
	}
	return bool(C.allot_wcache_put(c.c, cBytes(key), C.size_t(len(key)), (*C.uint32_t)(unsafe.SliceData(items)),
		C.size_t(len(items)), C.bool(seen)))
}

// Take returns the count pending at counter position i and resets it.
func (c *WarmCache) Take(i int) uint64 { return uint64(C.allot_wcache_take(c.c, C.size_t(i))) }

// WarmMaxWorkers bounds the workers a configuration keeps warm caches
// for; a worker of a higher index is served by Go.
const WarmMaxWorkers = C.ALLOT_WCONFIG_MAX_WORKERS

// WarmConfig is the C side of one configuration, which the C request hook
// reads: its Handle is the configuration's handle (Stateless aside). Made
// in config-new; freed in config-destroy, on whichever thread drops
// Envoy's last reference, when no stream uses it (the caller orders Free
// against TakeAll).
type WarmConfig struct {
	c      *C.allot_wconfig
	caches []WarmCache // the workers' caches, by worker index
}

// WarmExperiment is what a warm hit renders for one experiment: its
// header, and each variation's header value, dictionary member (`, key="value"`)
// and counter position; for an observed experiment, each variation's
// OutcomeIDs outcome stat ids (Stream.Observe's), nil otherwise.
type WarmExperiment struct {
	Header   string
	Values   []string
	Members  []string
	Stats    []uint32
	Outcomes []uint64
}

// WarmRender is how a configuration's warm hits render an assignment, as
// the plugin adds its headers: each assigned experiment's header when
// PerExperiment, the dictionary header (when the dictionary is not empty),
// the version header (when Version is not empty), the exposure record
// (when Exposure), and the counts at positions Evaluated, Hits and each
// assigned variation's; an observed assignment's outcome stat ids go into
// the stream's state as Stream.Observe leaves them (with EnvoyConfig), and
// if they cannot, the count at position Unrecorded (when HasUnrecorded).
type WarmRender struct {
	EnvoyConfig   Config
	Unrecorded    uint32
	HasUnrecorded bool

	Experiments                        []WarmExperiment
	PerExperiment, Exposure            bool
	Dictionary, VersionHeader, Version string
	Evaluated, Hits                    uint32
}

// newRender copies r into C; nil and an error naming the field if C
// refuses it (a dictionary that could exceed WarmMaxDictionary, more than
// 0xffff experiments or variations) or has no memory.
func newRender(r *WarmRender) (*C.allot_wrender, error) {
	if len(r.Experiments) > 0xffff {
		return nil, fmt.Errorf("experiments: %d, want at most %d", len(r.Experiments), 0xffff)
	}
	var mem cArena
	defer mem.free()
	cr := C.allot_wrender_new(C.uint32_t(len(r.Experiments)), C.bool(r.PerExperiment), C.bool(r.Exposure),
		mem.buf(r.Dictionary), mem.buf(r.VersionHeader), mem.buf(r.Version), C.uint32_t(r.Evaluated), C.uint32_t(r.Hits),
		C.uintptr_t(r.EnvoyConfig), C.uint32_t(r.Unrecorded), C.bool(r.HasUnrecorded), nil)
	if cr == nil {
		return nil, errors.New("no memory")
	}
	for i, x := range r.Experiments {
		n := len(x.Values)
		if len(x.Members) != n || len(x.Stats) != n || x.Outcomes != nil && len(x.Outcomes) != n*OutcomeIDs {
			C.allot_wrender_free(cr)
			return nil, fmt.Errorf("experiments[%d]: %d values, %d members, %d stats, %d outcome ids, want as many (%d ids each)",
				i, n, len(x.Members), len(x.Stats), len(x.Outcomes), OutcomeIDs)
		}
		var outcomes *C.size_t
		if x.Outcomes != nil {
			outcomes = (*C.size_t)(mem.alloc(len(x.Outcomes) * C.sizeof_size_t))
			copy(unsafe.Slice((*uint64)(unsafe.Pointer(outcomes)), len(x.Outcomes)), x.Outcomes)
		}
		values := (*C.allot_buffer)(mem.alloc(n * C.sizeof_allot_buffer))
		members := (*C.allot_buffer)(mem.alloc(n * C.sizeof_allot_buffer))
		vs, ms := unsafe.Slice(values, n), unsafe.Slice(members, n)
		for v := range n {
			vs[v], ms[v] = mem.buf(x.Values[v]), mem.buf(x.Members[v])
		}
		stats := (*C.uint32_t)(mem.alloc(n * 4))
		copy(unsafe.Slice((*uint32)(unsafe.Pointer(stats)), n), x.Stats)
		if !C.allot_wrender_set(cr, C.uint32_t(i), mem.buf(x.Header), C.uint32_t(n), values, members, stats, outcomes) {
			C.allot_wrender_free(cr)
			return nil, fmt.Errorf("experiments[%d]: refused (no variations, over %d, or the longest dictionary over %d bytes)", i, 0xffff, WarmMaxDictionary)
		}
	}
	return cr, nil
}

// WarmMaxDictionary bounds a configuration's longest possible dictionary
// value for the warm path; a configuration whose could be longer is
// served by Go.
const WarmMaxDictionary = C.ALLOT_WRENDER_MAX_DICTIONARY

// NewColdConfig makes the C side of a configuration the warm path does
// not serve: every request goes to Go.
func NewColdConfig() (*WarmConfig, error) {
	c := C.allot_wconfig_new(nil, nil, 0, 0, 0, 0, C.allot_buffer{}, nil)
	if c == nil {
		return nil, errors.New("cold config: no memory")
	}
	return &WarmConfig{c: c}, nil
}

// NewWarmConfig makes the C side of a configuration the warm path serves
// with plan p, which it takes (it is freed with the WarmConfig, or now on
// an error), rendering hits with r: a cache per worker, of at most
// maxEntries entries and maxBytes bytes each, with counters pending counts;
// exposureKey is the exposure record's filter state key.
func NewWarmConfig(p *WarmPlan, r *WarmRender, workers, maxEntries, maxBytes, counters int, exposureKey string) (*WarmConfig, error) {
	errs := cacheProblems(maxEntries, maxBytes, counters)
	if workers < 0 || workers > WarmMaxWorkers {
		errs = append(errs, fmt.Errorf("workers: %d, want 0 to %d", workers, WarmMaxWorkers))
	}
	if err := errors.Join(errs...); err != nil {
		p.Free()
		return nil, fmt.Errorf("warm config: %w", err)
	}
	cr, err := newRender(r)
	if err != nil {
		p.Free()
		return nil, fmt.Errorf("warm config: render: %w", err)
	}
	var mem cArena
	defer mem.free()
	c := C.allot_wconfig_new(p.p, cr, C.size_t(workers), C.size_t(maxEntries), C.size_t(maxBytes), C.size_t(counters),
		mem.buf(exposureKey), nil)
	p.p = nil // taken
	if c == nil {
		return nil, errors.New("warm config: no memory")
	}
	w := &WarmConfig{c: c, caches: make([]WarmCache, workers)}
	for i, wc := range unsafe.Slice(c.workers, workers) {
		w.caches[i] = WarmCache{c: wc}
	}
	return w, nil
}

// SetAnswerPrefix gives the C side the path prefix of the requests the
// configuration answers itself (plugin.Config.AnswerPrefix): the warm path
// hands every request whose :path begins with it to Go, never serving it
// from its cache. Call it before the handle reaches Envoy; "" (the
// default) answers none, and costs the warm path nothing.
func (w *WarmConfig) SetAnswerPrefix(prefix string) error {
	if !C.allot_wconfig_set_answer_prefix(w.c, C.allot_buffer{ptr: (*C.char)(unsafe.Pointer(unsafe.StringData(prefix))),
		length: C.size_t(len(prefix))}) {
		return errors.New("answer prefix: no memory")
	}
	return nil
}

// Handle is the configuration's handle: the C side's address, whose low
// bit is free (malloc aligns it) for Stateless.
func (w *WarmConfig) Handle() uintptr { return uintptr(unsafe.Pointer(w.c)) }

// Free releases the C side, its plan and its caches.
func (w *WarmConfig) Free() {
	C.allot_wconfig_free(w.c)
	w.c, w.caches = nil, nil
}

// Worker is worker i's cache; nil if the configuration is cold or has
// none for i. Use it on worker i's thread only (TakeAll excepted).
func (w *WarmConfig) Worker(i int) *WarmCache {
	if i < 0 || i >= len(w.caches) {
		return nil
	}
	return &w.caches[i]
}

// Workers is the number of workers with a cache.
func (w *WarmConfig) Workers() int { return len(w.caches) }

// TakeAll moves the counts pending in c into dst, by counter position
// (0 past c's counters).
func (c *WarmCache) TakeAll(dst []uint64) {
	n := min(len(dst), int(c.c.n_counters))
	clear(dst[n:])
	if n > 0 {
		C.allot_wcache_take_all(c.c, (*C.uint64_t)(unsafe.SliceData(dst)), C.size_t(n))
	}
}

// setWarmHandles tells the C request hook whether handles are WarmConfig
// handles (SetHandler).
func setWarmHandles(on bool) { C.allot_set_warm_handles(C.bool(on)) }

// requestHook calls the C request hook as Envoy does, for tests.
func requestHook(f, m uintptr) int32 {
	return int32(C.envoy_dynamic_module_on_http_filter_request_headers(C.uintptr_t(f), C.uintptr_t(m), true))
}

// cBytes is b's first byte for C (nil if empty).
func cBytes(b []byte) *C.char { return (*C.char)(unsafe.Pointer(unsafe.SliceData(b))) }

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// cArena is C memory for one call's arguments, freed together.
type cArena struct{ blocks []unsafe.Pointer }

func (m *cArena) alloc(n int) unsafe.Pointer {
	if n == 0 {
		return nil
	}
	p := C.calloc(1, C.size_t(n))
	m.blocks = append(m.blocks, p)
	return p
}

func (m *cArena) str(s string) *C.char {
	p := (*C.char)(m.alloc(len(s)))
	if p != nil {
		C.memcpy(unsafe.Pointer(p), unsafe.Pointer(unsafe.StringData(s)), C.size_t(len(s)))
	}
	return p
}

func (m *cArena) buf(s string) C.allot_buffer {
	return C.allot_buffer{ptr: m.str(s), length: C.size_t(len(s))}
}

func (m *cArena) free() {
	for _, p := range m.blocks {
		C.free(p)
	}
}

// warmEntry is a Go copy of a cached entry, for tests.
type warmEntry struct {
	items []uint32
	key   string
}

func copyEntry(e *C.allot_wentry) *warmEntry {
	if e == nil {
		return nil
	}
	out := &warmEntry{key: C.GoStringN(C.allot_wentry_key(e), C.int(e.key_length))}
	for _, x := range unsafe.Slice(C.allot_wentry_items(e), int(e.n_items)) {
		out.items = append(out.items, uint32(x))
	}
	return out
}

// find runs the warm lookup over request headers pairs, copied into C
// memory as Envoy's would be, and returns its result, the key it built
// and, on a hit, the entry. allocs is how many allocations the counting
// allocator saw during the lookup itself.
func (c *WarmCache) find(pairs [][2]string) (status int, key string, hit *warmEntry, allocs int) {
	var mem cArena
	defer mem.free()
	n := len(pairs)
	var h *C.allot_header
	if n <= WarmMaxHeaders && c.c.hdrs != nil {
		h = c.c.hdrs // the worker's scratch, as the hook fills it
	} else {
		h = (*C.allot_header)(mem.alloc(n * C.sizeof_allot_header))
	}
	hs := unsafe.Slice(h, n)
	for i, kv := range pairs {
		hs[i] = C.allot_header{key_ptr: mem.str(kv[0]), key_length: C.size_t(len(kv[0])),
			value_ptr: mem.str(kv[1]), value_length: C.size_t(len(kv[1]))}
	}
	var e *C.allot_wentry
	before := C.allot_counting_allocs()
	r := C.allot_wcache_find(c.c, h, C.size_t(n), &e)
	allocs = int(C.allot_counting_allocs() - before)
	return int(r), C.GoStringN(c.c.key, C.int(c.c.key_length)), copyEntry(e), allocs
}

// answers runs the warm path's answer-prefix check (allot_answered) over
// request headers pairs copied into C memory, with the configuration's
// prefix; false, as the hook decides, when it has none.
func (w *WarmConfig) answers(pairs [][2]string) bool {
	if w.c.answer_prefix.length == 0 {
		return false
	}
	var mem cArena
	defer mem.free()
	h := (*C.allot_header)(mem.alloc(len(pairs) * C.sizeof_allot_header))
	hs := unsafe.Slice(h, len(pairs))
	for i, kv := range pairs {
		hs[i] = C.allot_header{key_ptr: mem.str(kv[0]), key_length: C.size_t(len(kv[0])),
			value_ptr: mem.str(kv[1]), value_length: C.size_t(len(kv[1]))}
	}
	return bool(C.allot_answered(h, C.size_t(len(pairs)), w.c.answer_prefix))
}

// get looks key up directly.
func (c *WarmCache) get(key []byte) *warmEntry {
	var mem cArena
	defer mem.free()
	k := mem.str(string(key))
	return copyEntry(C.allot_wcache_get(c.c, C.allot_wkey_hash(k, C.size_t(len(key))), k, C.size_t(len(key))))
}

// count adds n to pending count i, as the warm path's hits do.
func (c *WarmCache) count(i int, n uint64) { C.allot_wcache_count(c.c, C.size_t(i), C.uint64_t(n)) }

// warmSlotSize is the bytes of one way of a cache's slot table.
const warmSlotSize = C.sizeof_allot_wslot

// ways is the number of ways of the cache's slot table; 0 until it is
// allocated.
func (c *WarmCache) ways() int {
	if c.c.slots == nil {
		return 0
	}
	return int(c.c.mask+1) * 4
}

// entries and bytes are what the cache holds and counts.
func (c *WarmCache) entries() int { return int(c.c.n) }
func (c *WarmCache) bytes() int   { return int(c.c.bytes) }

// allocatorCounting is the tests' allocator; countingReset zeroes its
// counts and lets budget more allocations succeed (negative: all).
func allocatorCounting() *C.allot_allocator { return C.allot_counting_allocator() }
func countingReset(budget int)              { C.allot_counting_reset(C.long(budget)) }
func countingAllocs() int                   { return int(C.allot_counting_allocs()) }
func countingFrees() int                    { return int(C.allot_counting_frees()) }
func countingLive() int                     { return int(C.allot_counting_live()) }
