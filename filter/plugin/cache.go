package plugin

// cache is a VM's cache of computed assignments, built for Go's collector
// on Wasm, where marking is neither concurrent nor cheap: a 4-way
// set-associative table of slots, each entry one string with no pointers
// inside (assignments, attribute values, dictionary). A miss allocates that
// string and nothing else, and the collector scans one pointer per slot,
// never the entries.
//
// Within a set the least recently used way is replaced. Beyond maxEntries
// or maxBytes a clock hand evicts across the table, giving entries used
// since it last passed a second chance.
type cache struct {
	slots      []slot
	mask       uint64 // sets - 1
	tick       uint32
	n, bytes   int
	maxEntries int
	maxBytes   int // 0: no byte bound
	hand       int
}

type slot struct {
	hash   uint64
	data   string // entry layout, see entry
	used   uint32 // cache tick of the last use
	keyLen uint32
	n      uint16 // assignments
	full   bool
	ref    bool // used since the clock hand last passed
}

const ways = 4

// entryOverhead estimates an entry's memory besides its data: its share of
// the slot table and the string's allocation header.
const entryOverhead = 64

// newCache returns a cache of at most maxEntries entries (> 0) and, when
// maxBytes > 0, at most maxBytes of estimated entry memory.
func newCache(maxEntries, maxBytes int) *cache {
	sets := 1
	for sets*ways < maxEntries {
		sets *= 2
	}
	return &cache{slots: make([]slot, sets*ways), mask: uint64(sets - 1), maxEntries: maxEntries, maxBytes: maxBytes}
}

// entry is a view of one cached assignment. data holds, in order: n
// assignments of 4 bytes each (experiment index << 16 | variation index,
// little endian, in dictionary order), the attribute values it was computed
// for (the key), and the dictionary header's value.
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

func (e entry) key() string  { return e.data[4*e.n : 4*e.n+e.keyLen] }
func (e entry) dict() string { return e.data[4*e.n+e.keyLen:] }

// size is the entry's estimated memory, for the byte bound.
func (e entry) size() int { return entryOverhead + len(e.data) }

func (s *slot) entry() entry { return entry{data: s.data, n: int(s.n), keyLen: int(s.keyLen)} }

// get returns the entry for key (whose hash is h), marking it used.
func (c *cache) get(h uint64, key []byte) (entry, bool) {
	set := c.slots[(h&c.mask)*ways:][:ways]
	for i := range set {
		s := &set[i]
		if s.full && s.hash == h && s.entry().key() == string(key) {
			c.tick++
			s.used, s.ref = c.tick, true
			return s.entry(), true
		}
	}
	return entry{}, false
}

// add caches e under hash h, replacing an entry with the same hash (a
// collision: the key comparison in get keeps it harmless) or the set's
// least recently used way, then evicts until the bounds hold.
func (c *cache) add(h uint64, e entry) {
	base := int(h&c.mask) * ways
	set := c.slots[base:][:ways]
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
	c.evict(&set[w])
	c.tick++
	set[w] = slot{hash: h, data: e.data, used: c.tick, keyLen: uint32(e.keyLen), n: uint16(e.n), full: true, ref: true}
	c.n++
	c.bytes += e.size()
	for c.n > 1 && (c.n > c.maxEntries || c.maxBytes > 0 && c.bytes > c.maxBytes) {
		c.sweep(base + w)
	}
}

// sweep advances the clock hand to the next entry not used since the hand
// last passed, skipping keep, and evicts it.
func (c *cache) sweep(keep int) {
	for {
		s := &c.slots[c.hand]
		i := c.hand
		c.hand = (c.hand + 1) % len(c.slots)
		switch {
		case !s.full || i == keep:
		case s.ref:
			s.ref = false
		default:
			c.evict(s)
			return
		}
	}
}

func (c *cache) evict(s *slot) {
	if s.full {
		c.n--
		c.bytes -= s.entry().size()
		*s = slot{}
	}
}
