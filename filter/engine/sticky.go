package engine

import "strconv"

// Sticky bucketing, as GrowthBook's SDKs do it: a unit's assignments are
// stored in documents, one per identifying attribute value (the unit's id,
// its device id, ...), and an experiment reuses a stored assignment instead
// of hashing, so that changing weights or coverage does not move units that
// were already assigned. AssignSticky and AssignStringsSticky read the
// documents and report the assignments to store; storing them is the
// caller's.

// StickyDoc is the sticky-bucket document of one attribute value of a unit:
// GrowthBook's StickyAssignmentsDocument.
type StickyDoc struct {
	// AttributeName is the attribute (an experiment's hash or fallback
	// attribute).
	AttributeName string `json:"attributeName"`
	// AttributeValue is the unit's value of it.
	AttributeValue string `json:"attributeValue"`
	// Assignments map StickyKey(experiment key, bucket version) to the
	// variation key: the variation's index in decimal ("0", "1", ...).
	Assignments map[string]string `json:"assignments"`
}

// StickyDocs are a unit's sticky-bucket documents keyed by
// StickyDocKey(AttributeName, AttributeValue), as GrowthBook keeps them.
type StickyDocs map[string]StickyDoc

// StickyDocKey is the key of the document of an attribute value:
// "name||value".
func StickyDocKey(name, value string) string { return name + "||" + value }

// StickyKey is the key of an experiment's assignment in a document:
// "key__version".
func StickyKey(experimentKey string, bucketVersion int) string {
	return experimentKey + "__" + strconv.Itoa(bucketVersion)
}

// StickyChange is an assignment to store: Assignments[Key] = Variation in
// the document of (Attribute, Value). AssignSticky reports one for every
// assignment by hash or by sticky bucket that the unit's documents do not
// already hold in that document.
type StickyChange struct {
	// Experiment is the experiment's index in the set.
	Experiment int
	// Attribute and Value identify the document: the attribute that was
	// hashed (the hash attribute, or the fallback attribute when the unit
	// has no value for it) and its value.
	Attribute, Value string
	// Key is StickyKey(experiment key, BucketVersion).
	Key string
	// Variation is the variation key.
	Variation string
}

// Apply stores changes in d, creating documents (and d) as needed, and
// returns d: the documents the unit holds after the evaluation that
// reported them.
func (d StickyDocs) Apply(changes []StickyChange) StickyDocs {
	for _, ch := range changes {
		if d == nil {
			d = StickyDocs{}
		}
		k := StickyDocKey(ch.Attribute, ch.Value)
		doc, ok := d[k]
		if !ok {
			doc = StickyDoc{AttributeName: ch.Attribute, AttributeValue: ch.Value}
		}
		if doc.Assignments == nil {
			doc.Assignments = map[string]string{}
		}
		doc.Assignments[ch.Key] = ch.Variation
		d[k] = doc
	}
	return d
}

// assignments returns the assignments of the document of (name, value),
// nil if there is none, without allocating for keys up to 128 bytes.
func (d StickyDocs) assignments(name, value string) map[string]string {
	var buf [128]byte
	k := append(append(append(buf[:0], name...), "||"...), value...)
	return d[string(k)].Assignments
}

// What a stored sticky bucket says about an experiment, besides a
// variation index.
const (
	stickyNone    int32 = -1 // nothing stored for this version: hash
	stickyBlocked int32 = -2 // a bucket of a version below minBucketVersion: excluded
)

// How decide placed a unit (bits).
const (
	usedHash   uint8 = 1 << iota // the hash was computed and decided (GrowthBook's hashUsed)
	usedSticky                   // a stored sticky bucket decided (GrowthBook's stickyBucketUsed)
)

// stickyDocs resolves, for one evaluation, the assignments of the unit's
// documents by slot: for every attribute an experiment may read a document
// of, the document of the unit's value of it. Nil when docs is empty.
func (s *Set) stickyDocs(dst []map[string]string, docs StickyDocs, attrs map[string]any, slots []any, strs []string) []map[string]string {
	if len(docs) == 0 {
		return nil
	}
	if cap(dst) < len(s.slots) {
		dst = make([]map[string]string, len(s.slots))
	}
	dst = dst[:len(s.slots)]
	for _, slot := range s.stickySlots {
		name := s.slots[slot]
		if v := unit(attrs, slots, strs, slot, name); v != "" {
			dst[slot] = docs.assignments(name, v)
		}
	}
	return dst
}

// stickyBucketing is an experiment's sticky bucketing, compiled.
type stickyBucketing struct {
	key              string // StickyKey(experiment key, bucketVersion)
	prefix           string // experiment key + "__"
	minBucketVersion int
	// fallbackSlot is the slot of the second document read: the fallback
	// attribute's, or without one "id"'s when "id" is an identifier
	// attribute of the set (GrowthBook reads the "id" document then); -1
	// for none.
	fallbackSlot  int
	variationKeys []string // "0", "1", ...: what a document stores
}

// compileSticky compiles the sticky bucketing of the set's experiments,
// defined by exps, after everything else: in one allocation each for the
// experiments' and the variations' keys.
func (s *Set) compileSticky(exps []Experiment) {
	// GrowthBook's identifier attributes: every experiment's hash and
	// fallback attribute, sticky bucketing disabled or not. Without a
	// fallback attribute, GrowthBook reads the "id" document as the
	// fallback's, when "id" is one of them.
	idSlot := -1
	identifier := make([]bool, len(s.slots))
	n, variations := 0, 0
	for i := range s.exps {
		c := &s.exps[i]
		identifier[c.hashSlot] = true
		if c.fallbackSlot >= 0 {
			identifier[c.fallbackSlot] = true
		}
		if c.hashAttr == "id" {
			idSlot = c.hashSlot
		} else if c.fallbackAttr == "id" {
			idSlot = c.fallbackSlot
		}
		if !exps[i].DisableStickyBucketing {
			n++
		}
		variations = max(variations, len(c.values))
	}
	for slot, ok := range identifier {
		if ok {
			s.stickySlots = append(s.stickySlots, slot)
		}
	}
	keys := make([]string, variations)
	for j := range keys {
		keys[j] = strconv.Itoa(j)
	}
	sticky := make([]stickyBucketing, 0, n)
	for i := range s.exps {
		c, e := &s.exps[i], &exps[i]
		if e.DisableStickyBucketing {
			continue
		}
		sb := stickyBucketing{
			key:              StickyKey(e.Key, e.BucketVersion),
			prefix:           e.Key + "__",
			minBucketVersion: e.MinBucketVersion,
			fallbackSlot:     c.fallbackSlot,
			variationKeys:    keys[:len(c.values)],
		}
		if sb.fallbackSlot < 0 {
			sb.fallbackSlot = idSlot
		}
		if sb.fallbackSlot == c.hashSlot {
			sb.fallbackSlot = -1 // the same document: read it once
		}
		sticky = append(sticky, sb)
		c.sticky = &sticky[len(sticky)-1]
	}
}

// stickyBucket is GrowthBook's getStickyBucketVariation for c: the
// variation the unit's stored bucket gives, stickyNone or stickyBlocked.
// docs are the unit's documents by slot (Set.stickyDocs). The document of
// the hash attribute wins over the fallback document's for the same key.
// held is the variation the document of the hashed attribute's value (the
// fallback's when viaFallback) holds for the key, stickyNone if none: what
// record compares, so that it needs no lookup of its own.
func (c *compiled) stickyBucket(docs []map[string]string, viaFallback bool) (sb, held int32) {
	st := c.sticky
	primary := docs[c.hashSlot]
	var secondary map[string]string
	if st.fallbackSlot >= 0 {
		secondary = docs[st.fallbackSlot]
	}
	if primary == nil && secondary == nil {
		return stickyNone, stickyNone
	}
	if st.minBucketVersion > 0 && (st.blockedBy(primary) || st.blockedBy(secondary)) {
		return stickyBlocked, stickyNone
	}
	key, ok := primary[st.key]
	inPrimary := ok
	if !ok {
		key, ok = secondary[st.key]
	}
	if !ok {
		return stickyNone, stickyNone
	}
	// The key of a variation Allot wrote is its index; anything else
	// (another index, another experiment definition's key) is not an
	// assignment, as in GrowthBook.
	sb = stickyNone
	if n, ok := decimal(key); ok && n < len(c.values) {
		sb = int32(n)
	}
	// Hashed on the fallback, the unit has no hash attribute value, hence
	// no primary document: the secondary one is the fallback's.
	if inPrimary || viaFallback {
		held = sb
	} else {
		held = stickyNone
	}
	return sb, held
}

// blockedBy reports whether m holds an assignment of the experiment for a
// bucket version below minBucketVersion: a key "<key>__<v>" with v in
// [0, minBucketVersion), written as GrowthBook writes numbers.
func (sb *stickyBucketing) blockedBy(m map[string]string) bool {
	for k := range m {
		if len(k) > len(sb.prefix) && k[:len(sb.prefix)] == sb.prefix {
			if v, ok := decimal(k[len(sb.prefix):]); ok && v < sb.minBucketVersion {
				return true
			}
		}
	}
	return false
}

// decimal parses a non-negative integer as JavaScript renders it ("0",
// "17", not "017" or "+1"), up to 10 digits.
func decimal(s string) (int, bool) {
	if s == "" || len(s) > 10 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// record appends the change that stores c's assignment of the unit to
// variation, hashed on attr's value, unless the document of that value
// already holds it (held, from stickyBucket).
func (c *compiled) record(changes []StickyChange, i int, attr, value string, variation int, held int32) []StickyChange {
	if int32(variation) == held {
		return changes
	}
	st := c.sticky
	return append(changes, StickyChange{Experiment: i, Attribute: attr, Value: value, Key: st.key, Variation: st.variationKeys[variation]})
}
