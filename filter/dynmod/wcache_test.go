//go:build cgo

package dynmod

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testPlan is a plan like a configuration's with the unit header, a
// country header that fills two slots, a constant slot and a header slot:
// slots 0 x-user-id, 1 and 3 x-country, 2 constant "node-a".
func testPlan(t *testing.T, a bool) *WarmPlan {
	t.Helper()
	headers := []WarmHeader{{"x-user-id", 0}, {"x-country", 1}, {"x-country", 3}}
	consts := []string{"", "", "node-a", ""}
	var p *WarmPlan
	var err error
	if a {
		p, err = newWarmPlan(4, headers, consts, "X-Experiment-", "x-experiments", "x-experiments-version", allocatorCounting())
	} else {
		p, err = NewWarmPlan(4, headers, consts, "X-Experiment-", "x-experiments", "x-experiments-version")
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testCache is a cache over testPlan, freed with its plan when the test
// ends.
func testCache(t *testing.T, maxEntries, maxBytes, counters int) *WarmCache {
	t.Helper()
	p := testPlan(t, false)
	c, err := NewWarmCache(p, maxEntries, maxBytes, counters)
	if err != nil {
		p.Free()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Free(); p.Free() })
	return c
}

// prime makes c's first insert, under a key no request builds (a
// request's key has a length byte per slot): until then a cache has
// neither table nor scratch, and builds no key.
func prime(t *testing.T, c *WarmCache) {
	t.Helper()
	if !c.Insert([]byte{0xff}, nil) {
		t.Fatal("the first insert was refused")
	}
}

// oracleKey is the key plugin.Plugin builds for a request (Plugin.assign's
// fill of header attributes: the first non-empty value of each header;
// Plugin.lookup's uvarint length then bytes per value), or ok false when
// the request carries a header the filter owns.
func oracleKey(pairs [][2]string) (key string, ok bool) {
	vals := []string{"", "", "node-a", ""}
	slots := map[string][]int{"x-user-id": {0}, "x-country": {1, 3}}
	for _, kv := range pairs {
		n := strings.ToLower(kv[0])
		if strings.HasPrefix(n, "x-experiment-") || n == "x-experiments" || n == "x-experiments-version" {
			return "", false
		}
		for _, i := range slots[kv[0]] {
			if vals[i] == "" {
				vals[i] = kv[1]
			}
		}
	}
	var b []byte
	for _, v := range vals {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b), true
}

// randomHeaders is a request's headers drawn from names that fill slots,
// owned names in several casings, and others; values empty, short or long
// enough (200 bytes and more) for a two-byte length.
func randomHeaders(r *rand.Rand) [][2]string {
	names := []string{"x-user-id", "x-country", "X-User-Id", "x-user", "x-user-idx", "accept", ":path", "cookie",
		"x-experiment-a", "X-EXPERIMENT-b", "x-experiments", "X-Experiments-Version", "x-experiments-versio", "x-experimentz"}
	n := r.IntN(8)
	var out [][2]string
	for range n {
		name := names[r.IntN(len(names))]
		var v string
		switch r.IntN(4) {
		case 0:
		case 1:
			v = fmt.Sprint(r.IntN(1000))
		case 2:
			v = strings.Repeat("é", 60+r.IntN(80))
		default:
			v = "u" + fmt.Sprint(r.IntN(50))
		}
		out = append(out, [2]string{name, v})
	}
	return out
}

// TestWarmKeyEqualsGo: for random header sets, the key C builds equals the
// plugin's (the oracle), and a request with a header the filter owns, in
// any casing, goes to Go.
func TestWarmKeyEqualsGo(t *testing.T) {
	c := testCache(t, 64, 1<<16, 0)
	prime(t, c)
	r := rand.New(rand.NewPCG(1, 2))
	owned := 0
	for i := range 20000 {
		pairs := randomHeaders(r)
		st, key, _, _ := c.find(pairs)
		want, ok := oracleKey(pairs)
		if !ok {
			owned++
			if st != warmOwned {
				t.Fatalf("request %d %q: status %d, want owned (%d)", i, pairs, st, warmOwned)
			}
			continue
		}
		if st != warmMiss || key != want {
			t.Fatalf("request %d %q: status %d key %q, want miss (%d) key %q", i, pairs, st, key, warmMiss, want)
		}
	}
	if owned == 0 || owned == 20000 {
		t.Fatalf("%d of 20000 requests had an owned header: the test does not cover both", owned)
	}
}

// TestWarmFindGoesToGo: what C does not decide goes to Go — a header name
// with a byte ≥ 0x80 (Go folds Unicode), more headers than the scratch
// holds, a key longer than the key buffer.
func TestWarmFindGoesToGo(t *testing.T) {
	c := testCache(t, 64, 1<<16, 0)
	if st, key, _, _ := c.find([][2]string{{"x-user-id", "u1"}, {"x-experiment-a", "on"}}); st != warmMiss || key != "" {
		t.Errorf("a cache nothing was inserted into: status %d, key %q; want a miss (%d), no key built", st, key, warmMiss)
	}
	prime(t, c)
	many := make([][2]string, WarmMaxHeaders+1)
	for i := range many {
		many[i] = [2]string{fmt.Sprintf("h%d", i), "v"}
	}
	for _, tc := range []struct {
		name  string
		pairs [][2]string
		want  int
	}{
		{"kelvin sign", [][2]string{{"x-user-id", "u1"}, {"x-experiment-\u212a", "v"}}, warmOwned},
		{"too many headers", many, warmTooMany},
		{"scratch full", many[:WarmMaxHeaders], warmMiss},
		// The key: 2 bytes of length and the unit, then 1, 1+6 ("node-a") and 1.
		{"longest key", [][2]string{{"x-user-id", strings.Repeat("a", WarmMaxKey-11)}}, warmMiss},
		{"key one byte too long", [][2]string{{"x-user-id", strings.Repeat("a", WarmMaxKey-10)}}, warmTooLong},
	} {
		if st, _, _, _ := c.find(tc.pairs); st != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, st, tc.want)
		}
	}
}

// insert caches, for the request of unit, its assignments.
func insert(t *testing.T, c *WarmCache, unit string, items ...uint32) bool {
	t.Helper()
	key, _ := oracleKey([][2]string{{"x-user-id", unit}})
	return c.Insert([]byte(key), items)
}

func hit(c *WarmCache, unit string) *warmEntry {
	st, _, e, _ := c.find([][2]string{{"accept", "*/*"}, {"x-user-id", unit}})
	if st != warmHit {
		return nil
	}
	return e
}

// TestWarmCacheRoundTrip: a hit returns what was inserted — the headers in
// order, the exposure record, the counter positions — and an entry with no
// exposure record has none.
func TestWarmCacheRoundTrip(t *testing.T) {
	c := testCache(t, 16, 1<<16, 4)
	items := []uint32{0<<16 | 1, 3<<16 | 0, 0xffff<<16 | 0xffff}
	if !insert(t, c, "u1", items...) || !insert(t, c, "u2") {
		t.Fatal("insert refused")
	}
	e := hit(c, "u1")
	if e == nil || !slices.Equal(e.items, items) {
		t.Fatalf("hit u1 = %+v", e)
	}
	if e := hit(c, "u2"); e == nil || len(e.items) != 0 {
		t.Fatalf("hit u2 = %+v", e)
	}
	if hit(c, "u3") != nil {
		t.Fatal("u3 hit, never inserted")
	}
}

// TestWarmCacheBounds: the cache never holds more than its entries or its
// bytes; an entry larger than the byte bound is refused; under the byte
// bound the oldest entries go first; within a full set, the least
// recently used way is replaced.
func TestWarmCacheBounds(t *testing.T) {
	items := make([]uint32, 25) // an entry of 25 assignments
	t.Run("entries", func(t *testing.T) {
		c := testCache(t, 8, 1<<20, 0)
		for i := range 1000 {
			unit := fmt.Sprint("u", i)
			if !insert(t, c, unit, items...) {
				t.Fatalf("insert %d refused", i)
			}
			if c.entries() > 8 {
				t.Fatalf("after %d inserts: %d entries, bound 8", i+1, c.entries())
			}
			if hit(c, unit) == nil {
				t.Fatalf("insert %d: not found right after", i)
			}
		}
		if c.entries() != 8 {
			t.Errorf("%d entries after 1000 inserts, want 8", c.entries())
		}
	})
	t.Run("bytes", func(t *testing.T) {
		one := WarmEntryOverhead + 25*4 + 4 + len("u0") + len("node-a") // the key: 4 lengths, the unit, "node-a"
		c := testCache(t, 1000, 3*one, 0)
		for i := range 4 {
			if !insert(t, c, fmt.Sprint("u", i), items...) {
				t.Fatalf("insert %d refused", i)
			}
			if c.bytes() > 3*one {
				t.Fatalf("after %d inserts: %d bytes, bound %d", i+1, c.bytes(), 3*one)
			}
		}
		if c.entries() != 3 || c.bytes() != 3*one {
			t.Errorf("%d entries of %d bytes, want 3 of %d", c.entries(), c.bytes(), 3*one)
		}
		if hit(c, "u0") != nil || hit(c, "u1") == nil || hit(c, "u2") == nil || hit(c, "u3") == nil {
			t.Errorf("byte bound: want the oldest (u0) evicted and u1..u3 kept")
		}
		if insert(t, c, "u9", make([]uint32, 3*one/4)...) {
			t.Error("an entry larger than the byte bound was accepted")
		}
		if c.entries() != 3 || hit(c, "u9") != nil {
			t.Errorf("a refused insert changed the cache: %d entries", c.entries())
		}
	})
	t.Run("lru in a set", func(t *testing.T) {
		c := testCache(t, 4, 1<<20, 0) // one set of 4 ways
		for i := range 4 {
			insert(t, c, fmt.Sprint("u", i), items...)
		}
		hit(c, "u0") // u1 is now the least recently used
		insert(t, c, "u4", items...)
		if hit(c, "u1") != nil || hit(c, "u0") == nil || hit(c, "u4") == nil {
			t.Error("want u1, the least recently used way, replaced")
		}
	})
}

// TestWarmCacheNoAllocOnHit: a lookup, hit or miss, allocates nothing; the
// first insert allocates the table and the scratch, every later insert
// once; freeing the cache and its plan frees every allocation.
func TestWarmCacheNoAllocOnHit(t *testing.T) {
	countingReset(-1)
	p := testPlan(t, true)
	c, err := newWarmCache(p, 64, 1<<16, 3, allocatorCounting())
	if err != nil {
		t.Fatal(err)
	}
	prime(t, c)
	before := countingAllocs()
	insert(t, c, "u1", 1<<16|2)
	if n := countingAllocs() - before; n != 1 {
		t.Errorf("an insert allocated %d times, want 1", n)
	}
	for i := range 1000 {
		st, _, _, n := c.find([][2]string{{"x-user-id", "u1"}, {"x-country", "fr"}})
		if st != warmHit && i == 0 {
			// x-country is part of the key: a miss, allocation-free too.
			if st != warmMiss {
				t.Fatalf("status %d", st)
			}
		}
		if n != 0 {
			t.Fatalf("lookup %d allocated %d times", i, n)
		}
		if _, _, e, n := c.find([][2]string{{"x-user-id", "u1"}}); e == nil || n != 0 {
			t.Fatalf("hit %d: entry %v, %d allocations", i, e, n)
		}
	}
	c.Free()
	p.Free()
	if a, f := countingAllocs(), countingFrees(); a != f || a == 0 {
		t.Errorf("%d allocations, %d frees", a, f)
	}
}

// TestWarmCacheNoMemory: each allocation of a plan, a cache and an insert
// failing in turn is an error or a refused insert, never a crash, and
// leaks nothing.
func TestWarmCacheNoMemory(t *testing.T) {
	failures := 0
	for budget := 0; budget < 64; budget++ {
		countingReset(budget)
		p, err := newWarmPlan(4, []WarmHeader{{"x-user-id", 0}, {"x-country", 1}}, []string{"", "", "n", ""},
			"x-experiment-", "x-experiments", "x-experiments-version", allocatorCounting())
		var c *WarmCache
		if err == nil {
			c, err = newWarmCache(p, 8, 1<<16, 2, allocatorCounting())
		}
		ok := err == nil && insert(t, c, "u1", 7)
		if c != nil {
			c.Free()
		}
		if p != nil {
			p.Free()
		}
		if a, f := countingAllocs(), countingFrees(); a != f {
			t.Fatalf("budget %d: %d allocations, %d frees", budget, a, f)
		}
		if ok {
			break
		}
		failures++
	}
	countingReset(-1)
	if failures < 10 {
		t.Errorf("only %d allocations failed in turn: the plan, cache and insert make more", failures)
	}
}

// TestWarmCacheGeneration: after Bump no entry of the previous generation
// is served; it is dropped when met, and the same key inserted again is.
func TestWarmCacheGeneration(t *testing.T) {
	c := testCache(t, 16, 1<<16, 0)
	insert(t, c, "u1", 1)
	insert(t, c, "u2", 1)
	if hit(c, "u1") == nil {
		t.Fatal("no hit before the bump")
	}
	c.Bump()
	if e := hit(c, "u1"); e != nil {
		t.Fatalf("after a bump, an old entry was served: %+v", e)
	}
	if c.entries() != 1 {
		t.Errorf("%d entries, want 1 (u1 dropped when met, u2 not yet)", c.entries())
	}
	insert(t, c, "u1", 2)
	if e := hit(c, "u1"); e == nil || !slices.Equal(e.items, []uint32{2}) {
		t.Fatalf("after a bump and an insert: %+v", e)
	}
}

// TestWarmPendingCounts: counts a worker adds are taken once.
func TestWarmPendingCounts(t *testing.T) {
	c := testCache(t, 16, 1<<16, 3)
	c.count(0, 1) // before the first insert there are no counts (and no hit to count)
	if n := c.Take(0); n != 0 {
		t.Fatalf("took %d before the first insert", n)
	}
	prime(t, c)
	c.count(0, 2)
	c.count(2, 5)
	c.count(3, 7) // out of range: ignored
	if a, b, d, e := c.Take(0), c.Take(1), c.Take(2), c.Take(3); a != 2 || b != 0 || d != 5 || e != 0 {
		t.Fatalf("took %d %d %d %d, want 2 0 5 0", a, b, d, e)
	}
	if c.Take(0) != 0 || c.Take(2) != 0 {
		t.Fatal("a count was taken twice")
	}
}

// TestWarmPlanRefused: an invalid plan or cache is an error naming each
// field.
func TestWarmPlanRefused(t *testing.T) {
	_, err := NewWarmPlan(2, []WarmHeader{{"", 0}, {"x", 2}}, []string{"a"}, "", "x-é", "v")
	for _, want := range []string{"headers[0].name", "headers[1].slot", "consts", "prefix", "dictionary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	p := testPlan(t, false)
	defer p.Free()
	_, err = NewWarmCache(p, 0, 0, -1)
	for _, want := range []string{"maxEntries", "maxBytes", "counters"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// testRender is a render table of two experiments.
func testRender() *WarmRender {
	return &WarmRender{PerExperiment: true, Exposure: true, Dictionary: "x-experiments", VersionHeader: "x-experiments-version",
		Version: "7", Evaluated: 0, Hits: 1, Experiments: []WarmExperiment{
			{Header: "x-experiment-a", Values: []string{"off", "on"}, Members: []string{`, a="off"`, `, a="on"`}, Stats: []uint32{4, 5}},
			{Header: "x-experiment-b", Values: []string{"x"}, Members: []string{`, b="x"`}, Stats: []uint32{6},
				Outcomes: []uint64{10, 11, 12, 13, 14, 15, 16}},
		}}
}

// TestWarmRenderRefused: a render table C cannot serve is an error naming
// the experiment, and its plan is freed.
func TestWarmRenderRefused(t *testing.T) {
	long := strings.Repeat("v", WarmMaxDictionary/2)
	for name, r := range map[string]*WarmRender{
		"lengths":         {Experiments: []WarmExperiment{{Header: "h", Values: []string{"a"}, Members: nil, Stats: []uint32{1}}}},
		"no variations":   {Experiments: []WarmExperiment{{Header: "h"}}},
		"outcome ids":     {Experiments: []WarmExperiment{{Header: "h", Values: []string{"a"}, Members: []string{"m"}, Stats: []uint32{1}, Outcomes: []uint64{1, 2}}}},
		"long dictionary": {Experiments: []WarmExperiment{{Header: "h", Values: []string{"a"}, Members: []string{long}, Stats: []uint32{1}}, {Header: "i", Values: []string{"a"}, Members: []string{long + "x"}, Stats: []uint32{1}}}},
	} {
		if _, err := NewWarmConfig(testPlan(t, false), r, 1, 16, 1<<16, 3, "k"); err == nil || !strings.Contains(err.Error(), "experiments[") {
			t.Errorf("%s: error %v, want one naming experiments[i]", name, err)
		}
	}
}

// TestWarmConfig: a configuration's C side has a handle with the
// Stateless bit free; a cold one has no worker caches, a warm one one per
// worker, each its own; bounds out of range are refused naming the field
// (and the plan is freed either way: ASan's leak check).
func TestWarmConfig(t *testing.T) {
	cold, err := NewColdConfig()
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Free()
	if cold.Handle()&Stateless != 0 || cold.Handle() == 0 || cold.Workers() != 0 || cold.Worker(0) != nil {
		t.Errorf("cold config: handle %#x, %d workers", cold.Handle(), cold.Workers())
	}
	p := testPlan(t, false)
	warm, err := NewWarmConfig(p, testRender(), 2, 16, 1<<16, 3, "wasm.allot")
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Free()
	if warm.Handle()&Stateless != 0 || warm.Workers() != 2 || warm.Worker(2) != nil || warm.Worker(-1) != nil {
		t.Fatalf("warm config: handle %#x, %d workers", warm.Handle(), warm.Workers())
	}
	insert(t, warm.Worker(0), "u1", 1)
	if hit(warm.Worker(0), "u1") == nil || hit(warm.Worker(1), "u1") != nil {
		t.Error("want worker 0's entry in worker 0's cache only")
	}
	if warm.Worker(1).ways() != 0 {
		t.Error("worker 1 has a slot table before its first insert")
	}
	prime(t, warm.Worker(1))
	warm.Worker(1).count(2, 4)
	got := []uint64{9, 9, 9, 9}
	warm.Worker(1).TakeAll(got)
	if !slices.Equal(got, []uint64{0, 0, 4, 0}) {
		t.Errorf("TakeAll = %v, want [0 0 4 0]", got)
	}
	_, err = NewWarmConfig(testPlan(t, false), testRender(), WarmMaxWorkers+1, 0, 1, 0, "wasm.allot")
	for _, want := range []string{"workers", "maxEntries"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// warmRecording is a recording Handler whose handles are WarmConfigs'.
type warmRecording struct{ recording }

func (*warmRecording) WarmHandles() {}

// TestRequestHookReadsOnlyWarmHandles: the C request hook reads a
// configuration's C side only for a WarmHandler; any other Handler's
// handles (bench/mindynmod's are small numbers) go to Go unread, and so
// does a WarmHandler's cold configuration.
func TestRequestHookReadsOnlyWarmHandles(t *testing.T) {
	r := &recording{}
	SetHandler(r)
	defer SetHandler(nil)
	for _, m := range []uintptr{1, 3, 7, 9} { // odd: a stateless stream's value is its handle
		if s := requestHook(9, m); s != 0 {
			t.Errorf("hook(%d) = %d, want 0 (continue)", m, s)
		}
	}
	if len(r.calls) != 4 {
		t.Errorf("the handler got %q, want 4 request_headers", r.calls)
	}
	cold, err := NewColdConfig()
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Free()
	w := &warmRecording{}
	SetHandler(w)
	if requestHook(9, cold.Handle()|Stateless); len(w.calls) != 1 {
		t.Errorf("a cold configuration's request: the handler got %q, want request_headers", w.calls)
	}
}

// FuzzWarmKey drives the C key building and lookup with arbitrary header
// sets: the key equals the plugin's (oracleKey) or the request goes to Go
// for a reason Go agrees with (an owned name) or a bound; a key inserted
// is then found, and nothing else is. The input is header lines, "name:
// value" separated by newlines.
func FuzzWarmKey(f *testing.F) {
	for _, seed := range []string{"", "x-user-id:u1", "x-user-id:\nx-user-id:u2\nx-country:fr", "X-Experiment-a:1\nx-user-id:u",
		"x-country:de\nx-country:\nx-user-id:\u00e9\u00e9", "x-experiments-VERSION:1", "\u212a:1\nx-user-id:z"} {
		f.Add(seed)
	}
	p, err := NewWarmPlan(4, []WarmHeader{{"x-user-id", 0}, {"x-country", 1}, {"x-country", 3}}, []string{"", "", "node-a", ""},
		"x-experiment-", "x-experiments", "x-experiments-version")
	if err != nil {
		f.Fatal(err)
	}
	defer p.Free()
	c, err := NewWarmCache(p, 64, 1<<16, 0)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Free()
	if !c.Insert([]byte{0xff}, nil) { // prime: a key no request builds
		f.Fatal("the first insert was refused")
	}
	f.Fuzz(func(t *testing.T, in string) {
		var pairs [][2]string
		for line := range strings.SplitSeq(in, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				pairs = append(pairs, [2]string{name, value})
			}
		}
		st, key, _, _ := c.find(pairs)
		want, ok := oracleKey(pairs)
		switch {
		case st == warmTooMany || st == warmTooLong:
			return
		case !ok || st == warmOwned:
			// Go and C agree that it is Go's; C also sends names it cannot fold.
			names := true
			for _, kv := range pairs {
				names = names && isASCII(kv[0])
			}
			if ok && names {
				t.Fatalf("%q: C sent an ASCII request without an owned name to Go", pairs)
			}
			if !ok && st != warmOwned {
				t.Fatalf("%q: an owned name, but status %d", pairs, st)
			}
			return
		case key != want:
			t.Fatalf("%q: C key %q, Go key %q", pairs, key, want)
		}
		c.Insert([]byte(key), []uint32{7})
		if st, _, e, _ := c.find(pairs); st != warmHit || e == nil || !slices.Equal(e.items, []uint32{7}) {
			t.Fatalf("%q: inserted, then status %d entry %+v", pairs, st, e)
		}
		c.Bump() // the next input starts from an empty cache, as far as lookups can tell
	})
}

// TestWarmCacheLazyTable: a worker's cache costs about its struct until
// its first insert, which allocates the slot table sized from both bounds
// (no more ways than the byte bound can fill: an entry is at least
// WarmEntryOverhead+1 bytes) and the worker's scratch.
func TestWarmCacheLazyTable(t *testing.T) {
	for _, tc := range []struct{ entries, bytes int }{{10000, 1 << 20}, {1000000, 64 << 10}, {WarmMaxEntries, 1 << 20}} {
		t.Run(fmt.Sprint(tc.entries, "/", tc.bytes), func(t *testing.T) {
			countingReset(-1)
			p := testPlan(t, true)
			defer p.Free()
			base := countingLive()
			c, err := newWarmCache(p, tc.entries, tc.bytes, 100, allocatorCounting())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Free()
			if idle := countingLive() - base; idle > 512 {
				t.Errorf("an idle cache holds %d bytes, want at most 512 (its struct)", idle)
			}
			insert(t, c, "u1", 1)
			units := min(tc.entries, tc.bytes/(WarmEntryOverhead+1))
			ways := 4
			for ways < units {
				ways *= 2
			}
			scratch := WarmMaxHeaders*32 + WarmMaxKey + 4*16 + 100*8 + 2*64 + 512
			if got, most := countingLive()-base, ways*warmSlotSize+scratch; got > most || c.ways() != ways {
				t.Errorf("after the first insert: %d bytes, %d ways; want %d ways (%d units) and at most %d bytes",
					got, c.ways(), ways, units, most)
			}
		})
	}
}

// TestWarmCacheSameInsert: inserting what a way already holds (the same
// key, the same assignments) allocates nothing and changes no count; other
// assignments under the same key replace the entry.
func TestWarmCacheSameInsert(t *testing.T) {
	c := countedCacheOfU1(t)
	n, b, allocs := c.entries(), c.bytes(), countingAllocs()
	for range 3 {
		if !insert(t, c, "u1", 1<<16|2, 3) {
			t.Fatal("a redundant insert was refused")
		}
	}
	if got := countingAllocs() - allocs; got != 0 || c.entries() != n || c.bytes() != b {
		t.Errorf("3 redundant inserts: %d allocations, %d entries of %d bytes; want 0, %d of %d", got, c.entries(), c.bytes(), n, b)
	}
	allocs, frees := countingAllocs(), countingFrees()
	insert(t, c, "u1", 7)
	if e := hit(c, "u1"); e == nil || !slices.Equal(e.items, []uint32{7}) || countingAllocs()-allocs != 1 || countingFrees()-frees != 1 || c.entries() != n {
		t.Errorf("new assignments under the same key: entry %+v, %d allocations, %d frees, %d entries",
			e, countingAllocs()-allocs, countingFrees()-frees, c.entries())
	}
}

// TestWarmEntryAsSmallAsGo: an entry costs C's byte bound (and C's
// allocator) at most 16 bytes more than the same entry costs Go's
// (plugin.cache's record: its recordHeader, read from filter/plugin/cache.go,
// then 4 bytes an assignment and the key), so that C holds about as many
// units as Go for the same cacheMaxBytes.
func TestWarmEntryAsSmallAsGo(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "plugin", "cache.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*recordHeader\s*=\s*(\d+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no recordHeader constant in filter/plugin/cache.go")
	}
	header, _ := strconv.Atoi(string(m[1]))
	for _, n := range []int{3, 25} {
		countingReset(-1)
		p := testPlan(t, true)
		c, err := newWarmCache(p, 64, 1<<16, 0, allocatorCounting())
		if err != nil {
			t.Fatal(err)
		}
		insert(t, c, "u1", 0) // the table and the scratch
		live, counted := countingLive(), c.bytes()
		key, _ := oracleKey([][2]string{{"x-user-id", "user-0001"}})
		c.Insert([]byte(key), make([]uint32, n))
		goRecord := header + 4*n + len(key)
		if got, alloc := c.bytes()-counted, countingLive()-live; got > goRecord+16 || alloc != got {
			t.Errorf("%d assignments, a %d-byte key: C counts %d bytes and allocates %d, Go's record is %d; want at most %d, equal",
				n, len(key), got, alloc, goRecord, goRecord+16)
		}
		c.Free()
		p.Free()
	}
}

// TestWarmCacheOfferWhileSkipping: while a worker skips its looks, Go's
// result for a new unit is not cached and allocates nothing; a seen
// unit's is; once the looks resume, a new unit's is again.
func TestWarmCacheOfferWhileSkipping(t *testing.T) {
	c := countedCacheOfU1(t) // the table exists
	c.c.skip = 5             // as allot_wcache_looked sets it after a window that missed
	allocs, n := countingAllocs(), c.entries()
	if c.Offer([]byte("\x02u2"), []uint32{7}, false) || countingAllocs() != allocs || c.entries() != n {
		t.Errorf("skipping: a new unit's result cached (%d allocations, %d entries)", countingAllocs()-allocs, c.entries())
	}
	if !c.Offer([]byte("\x02u3"), []uint32{7}, true) || c.entries() != n+1 {
		t.Errorf("skipping: a seen unit's result not cached (%d entries)", c.entries())
	}
	c.c.skip = 0
	if !c.Offer([]byte("\x02u2"), []uint32{7}, false) || c.entries() != n+2 {
		t.Errorf("looking: a new unit's result not cached (%d entries)", c.entries())
	}
}

// countedCacheOfU1 is a cache of 64 entries and 64 KiB over the counting
// allocator (reset), holding unit u1's entry; freed with the test.
func countedCacheOfU1(t *testing.T) *WarmCache {
	countingReset(-1)
	p := testPlan(t, true)
	t.Cleanup(p.Free)
	c, err := newWarmCache(p, 64, 1<<16, 3, allocatorCounting())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Free)
	insert(t, c, "u1", 1<<16|2, 3)
	return c
}
