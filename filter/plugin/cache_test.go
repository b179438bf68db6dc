package plugin

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// checkCache walks the ring log from tail to head and checks it against
// the slots: every live slot's record names it and holds its data, the
// records tile [tail, head) exactly, and the bounds hold.
func checkCache(t *testing.T, c *cache) {
	t.Helper()
	n := 0
	for i := range c.slots {
		s := &c.slots[i]
		if !s.full {
			continue
		}
		n++
		if set := int(s.hash&c.mask) * ways; i < set || i >= set+ways {
			t.Fatalf("slot %d holds hash %#x of set %d", i, s.hash, set/ways)
		}
		if idx := binary.LittleEndian.Uint32(c.arena[s.off:]); idx != uint32(i) {
			t.Fatalf("slot %d's record at %d names slot %d", i, s.off, idx)
		}
		if size := binary.LittleEndian.Uint32(c.arena[s.off+4:]); size != s.size {
			t.Fatalf("slot %d: record of %d bytes, slot says %d", i, size, s.size)
		}
	}
	if n != c.n {
		t.Fatalf("cache counts %d entries; slots hold %d", c.n, n)
	}
	if n > c.maxEntries {
		t.Fatalf("%d entries, bound %d", n, c.maxEntries)
	}
	if c.arena == nil {
		return
	}
	if c.maxBytes > 0 && len(c.arena) != c.maxBytes {
		t.Fatalf("arena of %d bytes, bound %d", len(c.arena), c.maxBytes)
	}
	if c.head-c.tail > uint64(len(c.arena)) {
		t.Fatalf("ring holds %d bytes in an arena of %d", c.head-c.tail, len(c.arena))
	}
	live := 0
	at := c.tail
	for at < c.head {
		off, idx, size, ok := c.record(at)
		if !ok {
			at += uint64(len(c.arena)) - off
			continue
		}
		if idx != skipRecord && c.slots[idx].full && uint64(c.slots[idx].off) == off {
			live++
		}
		at += recordHeader + uint64(size)
	}
	if at != c.head || live != n {
		t.Fatalf("ring walk ends at %d (head %d), finds %d live records of %d", at, c.head, live, n)
	}
}

// testEntry lays out an entry's assignments and key, followed by a tail
// that the plugin's entries do not have: the cache must keep it all the
// same, and payload reads it back.
func testEntry(key, tail string, assigned ...int) entry {
	var data []byte
	for _, a := range assigned {
		data = append(data, byte(a), byte(a>>8), byte(a>>16), byte(a>>24))
	}
	data = append(append(data, key...), tail...)
	return entry{data: string(data), n: len(assigned), keyLen: len(key)}
}

func payload(e entry) string { return e.data[4*e.n+e.keyLen:] }

func TestCacheEntryLayout(t *testing.T) {
	e := testEntry("k", `a="x", b="y"`, 3<<16|1, 70000&0xffff<<16|2)
	if e.key() != "k" || payload(e) != `a="x", b="y"` || e.assignments() != 2 {
		t.Fatalf("entry = key %q dict %q n %d", e.key(), payload(e), e.assignments())
	}
	if i, v := e.at(0); i != 3 || v != 1 {
		t.Errorf("at(0) = %d, %d; want 3, 1", i, v)
	}
	if i, v := e.at(1); i != 70000&0xffff || v != 2 {
		t.Errorf("at(1) = %d, %d; want %d, 2", i, v, 70000&0xffff)
	}
}

// TestCacheEntryBound: never more than maxEntries, every recent entry
// found, counts exact throughout.
func TestCacheEntryBound(t *testing.T) {
	c := newCache(100, 0)
	for i := range 1000 {
		k := "user-" + strconv.Itoa(i)
		h := hashBytes([]byte(k))
		c.add(h, testEntry(k, "d"+k, i))
		checkCache(t, c)
		if c.n > 100 {
			t.Fatalf("after %d adds: %d entries, bound 100", i+1, c.n)
		}
		if e, ok := c.get(h, []byte(k)); !ok || payload(e) != "d"+k {
			t.Fatalf("entry %q just added: found %v, dict %q", k, ok, payload(e))
		}
	}
	if c.n < 50 {
		t.Errorf("%d entries kept of 100 allowed", c.n)
	}
}

// TestCacheCollision: two keys with one hash never answer for each other;
// the newer replaces the older.
func TestCacheCollision(t *testing.T) {
	c := newCache(16, 0)
	c.add(42, testEntry("a", "da"))
	if _, ok := c.get(42, []byte("b")); ok {
		t.Fatal(`key "b" found under "a"'s hash`)
	}
	c.add(42, testEntry("b", "db"))
	checkCache(t, c)
	if e, ok := c.get(42, []byte("b")); !ok || payload(e) != "db" {
		t.Fatalf(`"b": found %v, dict %q`, ok, payload(e))
	}
	if _, ok := c.get(42, []byte("a")); ok || c.n != 1 {
		t.Fatalf(`"a" still found, or %d entries; want replaced`, c.n)
	}
}

// TestCacheRing: under a byte bound with entries of every size, wrapping
// the arena many times (with tails too short for a record), a found entry
// is always the one last added for its key, a new entry is always found,
// and the oldest go first.
func TestCacheRing(t *testing.T) {
	for _, bound := range []int{200, 1000, 4099} {
		c := newCache(1000, bound)
		rng := rand.New(rand.NewPCG(1, uint64(bound)))
		latest := map[string]string{}
		var order []string
		for i := range 5000 {
			k := "k" + strconv.Itoa(rng.IntN(400))
			d := strings.Repeat(string(rune('a'+i%26)), rng.IntN(60))
			h := hashBytes([]byte(k))
			c.add(h, testEntry(k, d, i&0xffff))
			latest[k] = d
			order = append(order, k)
			checkCache(t, c)
			if e, ok := c.get(h, []byte(k)); !ok || payload(e) != d || e.key() != k {
				t.Fatalf("bound %d, add %d: %q just added: found %v, dict %q", bound, i, k, ok, payload(e))
			}
			probe := "k" + strconv.Itoa(rng.IntN(400))
			if e, ok := c.get(hashBytes([]byte(probe)), []byte(probe)); ok && payload(e) != latest[probe] {
				t.Fatalf("bound %d: %q answers %q, last added %q", bound, probe, payload(e), latest[probe])
			}
		}
		// First in, first out: every record takes at least recordHeader
		// bytes, so an entry last added more than bound/recordHeader adds
		// ago has been overwritten.
		last := map[string]int{}
		for j, k := range order {
			last[k] = j
		}
		for k, j := range last {
			if _, ok := c.get(hashBytes([]byte(k)), []byte(k)); ok && len(order)-j > bound/recordHeader {
				t.Errorf("bound %d: %q, last added %d adds ago, still cached", bound, k, len(order)-j)
			}
		}
	}
}

// TestCacheTooBig: an entry larger than the byte bound is not cached and
// evicts nothing.
func TestCacheTooBig(t *testing.T) {
	c := newCache(16, 64)
	c.add(1, testEntry("a", "small"))
	c.add(2, testEntry("b", strings.Repeat("x", 100)))
	checkCache(t, c)
	if _, ok := c.get(2, []byte("b")); ok {
		t.Error("entry over the byte bound cached")
	}
	if _, ok := c.get(1, []byte("a")); !ok {
		t.Error("small entry evicted by one that does not fit")
	}
}

// TestCacheGrows: without a byte bound the arena grows to hold up to
// maxEntries entries (fewer where four keys share a set), every cached one
// current, and stays within a few times their size however often entries
// are replaced.
func TestCacheGrows(t *testing.T) {
	c := newCache(500, 0)
	d := strings.Repeat("v", 300)
	for round := range 20 {
		for i := range 500 {
			k := "u" + strconv.Itoa(i)
			c.add(hashBytes([]byte(k)), testEntry(k, d+strconv.Itoa(round)))
		}
		checkCache(t, c)
	}
	found := 0
	for i := range 500 {
		k := "u" + strconv.Itoa(i)
		if e, ok := c.get(hashBytes([]byte(k)), []byte(k)); ok && payload(e) == d+"19" {
			found++
		}
	}
	liveBytes := c.n * (recordHeader + 300 + 6)
	if found != c.n || c.n < 350 || len(c.arena) > 8*liveBytes {
		t.Fatalf("%d of %d entries current (%d cached); arena %d bytes for %d live", found, 500, c.n, len(c.arena), liveBytes)
	}
}

// TestCacheNoGarbage: once its arena exists, neither a miss nor a hit
// allocates.
func TestCacheNoGarbage(t *testing.T) {
	c := newCache(1000, 1<<16)
	keys := make([][]byte, 5000)
	entries := make([]entry, len(keys))
	for i := range keys {
		keys[i] = []byte("user-" + strconv.Itoa(i))
		entries[i] = testEntry(string(keys[i]), "checkout=blue", i)
	}
	c.add(hashBytes(keys[0]), entries[0])
	i := 0
	allocs := testing.AllocsPerRun(20000, func() {
		i = (i + 1) % len(keys)
		h := hashBytes(keys[i])
		if _, ok := c.get(h, keys[i]); !ok {
			c.add(h, entries[i])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per lookup", allocs)
	}
}
