package plugin

import (
	"encoding/binary"
)

// cache is a VM's cache of computed assignments, built so that the request
// path produces no garbage. Go's collector on Wasm never returns memory:
// linear memory only grows, so every byte of garbage that piles up between
// two collections is RSS for good. A cache of heap strings, one per miss,
// held a worker VM's memory near 2.5 times the cache's size.
//
// Entries therefore live in one byte arena, written as a ring log: a miss
// appends its record at the head, evicting the oldest records ahead of it;
// the arena is allocated once, at the first miss, and never replaced (nor is
// the index, so a VM that serves no request, like the main thread's, pays
// for neither). An index of slots (4-way set-associative, least recently used way replaced)
// finds an entry by the hash of its key and holds no pointers but the
// arena's.
//
// Bounds: at most maxEntries entries, and the arena holds maxBytes of
// records. With maxBytes 0 (no byte bound) the arena starts small and
// doubles when full. Eviction under either bound is first in, first out.
type cache struct {
	slots      []slot
	mask       uint64 // sets - 1
	tick       uint32
	n          int // live entries
	maxEntries int
	maxBytes   int // 0: no byte bound

	// arena is the ring log: records [slot uint32][len uint32][data]. head
	// and tail count bytes written and dropped since the arena was made;
	// head-tail ≤ len(arena), a record never wraps (the rest of the arena
	// is skipped instead).
	arena      []byte
	head, tail uint64
}

type slot struct {
	hash   uint64
	off    uint32 // record offset in the arena
	size   uint32 // data bytes
	used   uint32 // cache tick of the last use
	keyLen uint32
	n      uint16 // assignments
	full   bool
}

const (
	ways = 4
	// recordHeader precedes every entry's data in the arena.
	recordHeader = 8
	// skipRecord marks arena bytes that hold no entry.
	skipRecord = ^uint32(0)
	// minArena is the first arena without a byte bound.
	minArena = 64 << 10
)

// newCache returns a cache of at most maxEntries entries (> 0) and, when
// maxBytes > 0, at most maxBytes of records.
func newCache(maxEntries, maxBytes int) *cache {
	sets := 1
	for sets*ways < maxEntries {
		sets *= 2
	}
	return &cache{mask: uint64(sets - 1), maxEntries: maxEntries, maxBytes: maxBytes}
}

// entry is a view of one assignment. data holds, in order: n assignments
// of 4 bytes each (experiment index << 16 | variation index, little
// endian, in dictionary order), then the attribute values it was computed
// for (the key). An entry from get views the arena: it is valid until the
// next add.
type entry struct {
	data   string
	n      int
	keyLen int
}

// assignments is the number of experiments the unit is in.
func (e entry) assignments() int { return e.n }

// at returns the j-th assignment's experiment and variation indices.
func (e entry) at(j int) (exp, variation int) {
	d := e.data[4*j : 4*j+4]
	return int(d[2]) | int(d[3])<<8, int(d[0]) | int(d[1])<<8
}

func (e entry) key() string { return e.data[4*e.n : 4*e.n+e.keyLen] }

func (c *cache) entry(s *slot) entry {
	d := c.arena[s.off+recordHeader:][:s.size]
	return entry{data: stringView(d), n: int(s.n), keyLen: int(s.keyLen)}
}

// get returns the entry for key (whose hash is h), marking it used.
func (c *cache) get(h uint64, key []byte) (entry, bool) {
	if c.slots == nil {
		return entry{}, false
	}
	set := c.slots[(h&c.mask)*ways:][:ways]
	for i := range set {
		s := &set[i]
		if s.full && s.hash == h {
			if e := c.entry(s); e.key() == string(key) {
				c.tick++
				s.used = c.tick
				return e, true
			}
		}
	}
	return entry{}, false
}

// add copies e into the cache under hash h, replacing an entry with the
// same hash (a collision: the key comparison in get keeps it harmless) or
// the set's least recently used way, then evicts the oldest entries until
// the bounds hold. An entry larger than the byte bound is not cached.
func (c *cache) add(h uint64, e entry) {
	rec := recordHeader + len(e.data)
	if c.maxBytes > 0 && rec > c.maxBytes {
		return
	}
	if c.slots == nil {
		c.slots = make([]slot, (c.mask+1)*ways)
	}
	set := c.slots[(h&c.mask)*ways:][:ways]
	w := -1
	for i := range set {
		if set[i].full && set[i].hash == h {
			w = i
			break
		}
	}
	if w < 0 {
		for i := range set {
			if !set[i].full {
				w = i
				break
			}
			if w < 0 || c.tick-set[i].used > c.tick-set[w].used {
				w = i
			}
		}
	}
	c.drop(&set[w])
	idx := int(h&c.mask)*ways + w
	off := c.reserve(rec)
	r := c.arena[off : off+rec]
	binary.LittleEndian.PutUint32(r, uint32(idx))
	binary.LittleEndian.PutUint32(r[4:], uint32(len(e.data)))
	copy(r[recordHeader:], e.data)
	c.tick++
	c.slots[idx] = slot{hash: h, off: uint32(off), size: uint32(len(e.data)), used: c.tick, keyLen: uint32(e.keyLen), n: uint16(e.n), full: true}
	c.n++
	for c.n > c.maxEntries {
		c.pop()
	}
}

// reserve returns the offset of n free arena bytes at the head, evicting
// the oldest records that occupy them.
func (c *cache) reserve(n int) int {
	if c.arena == nil {
		size := c.maxBytes
		if size == 0 {
			size = max(minArena, 2*n)
		}
		c.arena = make([]byte, size)
	}
	if c.maxBytes == 0 && int(c.head-c.tail)+2*n > len(c.arena) {
		c.grow(n)
	}
	size := uint64(len(c.arena))
	if rest := size - c.head%size; rest < uint64(n) {
		c.room(rest)
		if rest >= recordHeader {
			r := c.arena[c.head%size:]
			binary.LittleEndian.PutUint32(r, skipRecord)
			binary.LittleEndian.PutUint32(r[4:], uint32(rest-recordHeader))
		}
		c.head += rest
	}
	c.room(uint64(n))
	off := int(c.head % size)
	c.head += uint64(n)
	return off
}

// room evicts records from the tail until n more bytes fit.
func (c *cache) room(n uint64) {
	for c.head+n-c.tail > uint64(len(c.arena)) {
		c.pop()
	}
}

// pop drops the oldest record, evicting its entry if it is still live.
func (c *cache) pop() {
	off, idx, n, ok := c.record(c.tail)
	if !ok {
		c.tail += uint64(len(c.arena)) - off
		return
	}
	c.tail += recordHeader + uint64(n)
	if idx != skipRecord {
		if s := &c.slots[idx]; s.full && uint64(s.off) == off {
			c.drop(s)
		}
	}
}

// grow moves the live records to the start of a new arena (no byte bound)
// at least twice the size of those records and n, doubling it as needed.
// Dropped records are left behind.
func (c *cache) grow(n int) {
	var live []uint32 // slots of the live records, oldest first
	need := 2 * n
	for at := c.tail; at < c.head; {
		off, idx, dn, ok := c.record(at)
		if !ok {
			at += uint64(len(c.arena)) - off
			continue
		}
		at += recordHeader + uint64(dn)
		if idx != skipRecord && c.slots[idx].full && uint64(c.slots[idx].off) == off {
			live = append(live, idx)
			need += recordHeader + int(dn)
		}
	}
	size := len(c.arena)
	for 2*need > size {
		size *= 2
	}
	arena, head := make([]byte, size), 0
	for _, idx := range live {
		s := &c.slots[idx]
		rec := recordHeader + int(s.size)
		copy(arena[head:], c.arena[s.off:int(s.off)+rec])
		s.off = uint32(head)
		head += rec
	}
	c.arena, c.head, c.tail = arena, uint64(head), 0
}

// record reads the record header at ring position at: its arena offset,
// slot and data length; ok is false where the arena's end is too short for
// a header (those bytes are skipped).
func (c *cache) record(at uint64) (off uint64, idx, n uint32, ok bool) {
	size := uint64(len(c.arena))
	off = at % size
	if size-off < recordHeader {
		return off, 0, 0, false
	}
	r := c.arena[off:]
	return off, binary.LittleEndian.Uint32(r), binary.LittleEndian.Uint32(r[4:]), true
}

// drop empties s; its record stays in the arena until the tail passes it.
func (c *cache) drop(s *slot) {
	if s.full {
		c.n--
		*s = slot{}
	}
}

// bytes is the arena space the live and dead records occupy.
func (c *cache) bytes() int { return int(c.head - c.tail) }
