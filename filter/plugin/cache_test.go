package plugin

import (
	"strconv"
	"testing"
)

// checkCache recounts the cache's entries and bytes from its slots.
func checkCache(t *testing.T, c *cache) {
	t.Helper()
	n, bytes := 0, 0
	for i := range c.slots {
		if s := &c.slots[i]; s.full {
			n++
			bytes += s.entry().size()
			if set := int(s.hash&c.mask) * ways; i < set || i >= set+ways {
				t.Fatalf("slot %d holds hash %#x of set %d", i, s.hash, set/ways)
			}
		}
	}
	if n != c.n || bytes != c.bytes {
		t.Fatalf("cache counts %d entries, %d bytes; slots hold %d, %d", c.n, c.bytes, n, bytes)
	}
}

func testEntry(key, dict string, assigned ...int) entry {
	var data []byte
	for _, a := range assigned {
		data = append(data, byte(a), byte(a>>8), byte(a>>16), byte(a>>24))
	}
	data = append(append(data, key...), dict...)
	return entry{data: string(data), n: len(assigned), keyLen: len(key)}
}

func TestCacheEntryLayout(t *testing.T) {
	e := testEntry("k", `a="x", b="y"`, 3<<16|1, 70000&0xffff<<16|2)
	if e.key() != "k" || e.dict() != `a="x", b="y"` || e.assignments() != 2 {
		t.Fatalf("entry = key %q dict %q n %d", e.key(), e.dict(), e.assignments())
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
		if e, ok := c.get(h, []byte(k)); !ok || e.dict() != "d"+k {
			t.Fatalf("entry %q just added: found %v, dict %q", k, ok, e.dict())
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
	if e, ok := c.get(42, []byte("b")); !ok || e.dict() != "db" {
		t.Fatalf(`"b": found %v, dict %q`, ok, e.dict())
	}
	if _, ok := c.get(42, []byte("a")); ok || c.n != 1 {
		t.Fatalf(`"a" still found, or %d entries; want replaced`, c.n)
	}
}

// TestCacheSecondChance: under a bound, an entry used since the clock hand
// last passed survives the sweep that evicts unused ones.
func TestCacheSecondChance(t *testing.T) {
	c := newCache(64, 0)
	hot := "hot"
	c.add(hashBytes([]byte(hot)), testEntry(hot, "d"))
	for i := range 500 {
		k := "cold-" + strconv.Itoa(i)
		c.add(hashBytes([]byte(k)), testEntry(k, "d"))
		if _, ok := c.get(hashBytes([]byte(hot)), []byte(hot)); !ok {
			t.Fatalf("hot entry evicted after %d cold adds", i+1)
		}
	}
	checkCache(t, c)
}
