package engine

import (
	"math"
	"slices"
)

// Condition results memoized during one Assign, by condition id.
const (
	condUnknown int8 = iota
	condTrue
	condFalse
)

// eval is GrowthBook's run(experiment) minus the SDK-only steps (URL
// targeting, query-string and context overrides, QA mode, prerequisites).
// It fills the zero Assignment r in place. docs are the unit's sticky-bucket
// documents by slot (Set.stickyDocs); nil when it has none. held is what
// the document of the hashed value holds (stickyBucket).
func (c *compiled) eval(r *Assignment, attrs map[string]any, slots []any, strs []string, memo []int8, u *unitHash, docs []map[string]string) (held int32) {
	r.Key = c.key
	r.HashAttribute, r.HashValue = c.hashInput(attrs, slots, strs)
	sb, held := stickyNone, stickyNone
	if docs != nil && c.sticky != nil && r.HashValue != "" {
		sb, held = c.stickyBucket(docs, r.HashAttribute != c.hashAttr)
	}
	var used uint8
	r.VariationID, r.InExperiment, used = c.decide(r.HashValue, sb, attrs, slots, strs, memo, u)
	r.HashUsed, r.StickyBucketUsed = used&usedHash != 0, used&usedSticky != 0
	if len(c.values) > 0 {
		r.Value = c.values[r.VariationID]
	}
	return held
}

// hashInput returns the attribute hashed for the unit and its value: the
// hash attribute, or the fallback attribute when the first is missing.
func (c *compiled) hashInput(attrs map[string]any, slots []any, strs []string) (attr, value string) {
	attr, value = c.hashAttr, unit(attrs, slots, strs, c.hashSlot, c.hashAttr)
	if value == "" && c.fallbackSlot >= 0 {
		if v := unit(attrs, slots, strs, c.fallbackSlot, c.fallbackAttr); v != "" {
			attr, value = c.fallbackAttr, v
		}
	}
	return attr, value
}

// decide places the unit whose hash input is hv: the variation index,
// whether it is in the experiment, and what decided (usedHash,
// usedSticky). sb is what the unit's sticky bucket says (stickyBucket):
// a stored variation (kept) or stickyBlocked (excluded, after the
// targeting and the hash, in GrowthBook's order). It returns scalars only,
// so AssignStrings writes nothing with pointers (which, while the
// collector marks, would each pay a write barrier).
func (c *compiled) decide(hv string, sb int32, attrs map[string]any, slots []any, strs []string, memo []int8, u *unitHash) (variation int, in bool, used uint8) {
	if len(c.values) < 2 || hv == "" {
		return 0, false, 0
	}
	if sb >= 0 {
		return c.kept(hv, int(sb), u)
	}
	// A condition already known to be false excludes the unit before any
	// hashing: every check from here on only excludes, so their order does
	// not change the result.
	if c.cond != nil && c.condID < len(memo) && memo[c.condID] == condFalse {
		return 0, false, 0
	}
	if len(c.filters) > 0 {
		if c.filteredOut(attrs, slots, strs, u) {
			return 0, false, 0
		}
	} else if c.hasNS {
		if n := nsHash(hv, c.nsID); !(n >= c.nsStart && n < c.nsEnd) {
			return 0, false, 0
		}
	}
	if c.cond != nil && !c.matches(attrs, slots, memo) {
		return 0, false, 0
	}
	n, ok := u.hash(c.seed, c.seedState, hv, c.hashVersion)
	if !ok {
		return 0, false, 0
	}
	if sb == stickyBlocked {
		return 0, false, usedSticky
	}
	idx := ChooseVariation(n, c.ranges)
	if idx < 0 {
		return 0, false, 0
	}
	if c.hasForce {
		if c.force >= 0 && c.force < len(c.values) {
			return c.force, true, 0
		}
		return 0, false, 0
	}
	if idx < len(c.values) {
		return idx, true, usedHash
	}
	return 0, false, usedHash
}

// kept is decide for a unit whose sticky bucket stores variation: no
// targeting and no bucket ranges, but the hash must be computable and a
// forced variation still wins, as in GrowthBook.
func (c *compiled) kept(hv string, variation int, u *unitHash) (int, bool, uint8) {
	if _, ok := u.hash(c.seed, c.seedState, hv, c.hashVersion); !ok {
		return 0, false, 0
	}
	if c.hasForce {
		if c.force >= 0 && c.force < len(c.values) {
			return c.force, true, 0
		}
		return 0, false, 0
	}
	return variation, true, usedHash | usedSticky
}

// matches evaluates c's condition, or reuses the result for another
// experiment with the same condition in this Assign.
func (c *compiled) matches(attrs map[string]any, slots []any, memo []int8) bool {
	if c.condID >= len(memo) {
		return c.cond.root.eval(attrs, slots)
	}
	switch memo[c.condID] {
	case condTrue:
		return true
	case condFalse:
		return false
	}
	ok := c.cond.root.eval(attrs, slots)
	memo[c.condID] = condFalse
	if ok {
		memo[c.condID] = condTrue
	}
	return ok
}

// input is one evaluation's attributes: by slot from strs (string values,
// "" for absent) or slots when resolved, else by name from attrs.
// Conditions read attrs and slots only: with strs, every condition's
// outcome must be known in advance (AssignStrings). The three are separate
// parameters, never one struct, so that escape analysis keeps the callers'
// stack arrays on the stack.

// unit is hashValue of a top-level attribute.
func unit(attrs map[string]any, slots []any, strs []string, slot int, name string) string {
	switch {
	case strs != nil:
		return strs[slot]
	case slots != nil:
		return hashValue(slots[slot])
	}
	return hashValue(attrs[name])
}

func (c *compiled) filteredOut(attrs map[string]any, slots []any, strs []string, u *unitHash) bool {
	for i := range c.filters {
		f := &c.filters[i]
		v := unit(attrs, slots, strs, f.slot, f.attr)
		if v == "" {
			return true
		}
		n, ok := u.hash(f.seed, f.seedState, v, f.hashVersion)
		if !ok || ChooseVariation(n, f.ranges) < 0 {
			return true
		}
	}
	return false
}

// hashValue is the reference's attributes[name] || "" as a string: numbers
// and booleans render canonically; false, 0, NaN, null, "" and absent
// (JavaScript's falsy values) are missing, as are arrays and objects.
func hashValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == 0 || math.IsNaN(x) {
			return ""
		}
		return formatNumber(x)
	case bool:
		if x {
			return "true"
		}
	}
	return ""
}

// Len is the number of compiled experiments.
func (s *Set) Len() int { return len(s.exps) }

// Keys returns the experiment keys in definition order.
func (s *Set) Keys() []string { return slices.Clone(s.keys) }

// Variations returns the rendered variation values (header values) of the
// i-th experiment.
func (s *Set) Variations(i int) []string { return slices.Clone(s.exps[i].values) }

// Assign evaluates every experiment for attrs, in definition order, appending
// one Assignment per experiment to dst. Units not in an experiment get
// VariationID 0 and InExperiment false, as in GrowthBook. Assign does not
// allocate beyond growing dst when attributes are strings. It ignores sticky
// buckets: AssignSticky is Assign with them.
func (s *Set) Assign(dst []Assignment, attrs Attributes) []Assignment {
	m := map[string]any(attrs)
	var stack [32]any
	slots := s.resolve(&stack, m)
	var memoStack [128]int8
	memo := memoStack[:min(s.conds, len(memoStack))] // more distinct conditions than that: the rest are not memoized
	var u unitHash
	for i := range s.exps {
		c := &s.exps[i]
		dst = append(dst, Assignment{})
		c.eval(&dst[len(dst)-1], m, slots, nil, memo, &u, nil)
	}
	return dst
}

// AssignSticky is Assign with GrowthBook's sticky bucketing, for a unit
// whose stored documents are docs (nil or empty when it has none). For
// every experiment not disabling it, a variation stored in the document of
// the unit's hash attribute value, or else of its fallback attribute value
// ("id"'s without a fallback attribute, when some experiment hashes "id"),
// under StickyKey(key, BucketVersion), is kept: the unit skips the
// experiment's namespace, filters and condition and the bucket ranges
// (Assignment.StickyBucketUsed). A stored key for a version below
// MinBucketVersion excludes the unit. It appends to changes what the
// documents must store after this evaluation (StickyDocs.Apply): every
// assignment by hash or sticky bucket, not forced, that the document of the
// hashed attribute does not already hold. Without documents the
// assignments are Assign's; AssignSticky allocates only to grow dst and
// changes when attributes are strings and keys of documents
// (StickyDocKey) at most 128 bytes.
func (s *Set) AssignSticky(dst []Assignment, attrs Attributes, docs StickyDocs, changes []StickyChange) ([]Assignment, []StickyChange) {
	m := map[string]any(attrs)
	var stack [32]any
	slots := s.resolve(&stack, m)
	var memoStack [128]int8
	memo := memoStack[:min(s.conds, len(memoStack))]
	var docStack [32]map[string]string
	byslot := s.stickyDocs(docStack[:0], docs, m, slots, nil)
	var u unitHash
	for i := range s.exps {
		c := &s.exps[i]
		dst = append(dst, Assignment{})
		r := &dst[len(dst)-1]
		held := c.eval(r, m, slots, nil, memo, &u, byslot)
		if c.sticky != nil && r.InExperiment && r.HashUsed {
			changes = c.record(changes, i, r.HashAttribute, r.HashValue, r.VariationID, held)
		}
	}
	return dst, changes
}

// resolve looks every attribute the set reads up once, into stack when
// they fit; experiments read them by slot.
func (s *Set) resolve(stack *[32]any, m map[string]any) []any {
	slots := stack[:0]
	if len(s.slots) > len(stack) {
		slots = make([]any, 0, len(s.slots))
	}
	for _, name := range s.slots {
		slots = append(slots, m[name])
	}
	return slots
}

// Outcomes are the results of a set's distinct conditions for one
// combination of the values of ConditionAttributes: the part of an
// assignment that does not depend on the unit. A caller that sees few such
// combinations (country, platform, app version, ...) computes them once per
// combination with Outcomes and assigns each unit with AssignStrings, which
// then only hashes.
type Outcomes []int8

// ConditionAttributes returns the sorted top-level attribute names the
// set's conditions read: the only attributes Outcomes depend on.
func (s *Set) ConditionAttributes() []string { return slices.Clone(s.condRefs) }

// Outcomes evaluates every distinct condition of the set for attrs, reusing
// dst's storage.
func (s *Set) Outcomes(dst Outcomes, attrs Attributes) Outcomes {
	m := map[string]any(attrs)
	slots := make([]any, len(s.slots))
	for i, name := range s.slots {
		slots[i] = m[name]
	}
	dst = slices.Grow(dst[:0], len(s.byCond))
	for _, c := range s.byCond {
		o := condFalse
		if c.root.eval(m, slots) {
			o = condTrue
		}
		dst = append(dst, o)
	}
	return dst
}

// AssignStrings is Assign for attributes that are all strings, reduced to
// what a proxy needs: it appends, per experiment in definition order, the
// variation index the unit is in, or -1 when it is not in the experiment.
// vals[i] is the value of Referenced()[i], "" for absent; o must be the
// set's Outcomes for the same values of ConditionAttributes (it panics when
// o is not the set's). The result is Assign's for the map of the non-empty
// values; no condition is evaluated, nothing is allocated beyond growing
// dst, and nothing with pointers is written.
func (s *Set) AssignStrings(dst []int32, vals []string, o Outcomes) []int32 {
	var stack [32]string
	strs := s.strings(&stack, vals, o)
	var u unitHash
	for i, g := range s.gate {
		// Exactly decide's first exits, taken without reading the
		// experiment.
		if g == gateShut || g >= 0 && o[g] == condFalse {
			dst = append(dst, -1)
			continue
		}
		v := int32(-1)
		c := &s.exps[i]
		_, hv := c.hashInput(nil, nil, strs)
		if variation, in, _ := c.decide(hv, stickyNone, nil, nil, strs, o, &u); in {
			v = int32(variation)
		}
		dst = append(dst, v)
	}
	return dst
}

// AssignStringsSticky is AssignStrings with sticky bucketing: its result is
// AssignSticky's for the map of the non-empty values, and so are the
// changes it appends. A stored variation is kept even where o says the
// experiment's condition fails. A loop of its own, so that AssignStrings
// pays nothing for it (a shared loop measured 9% slower).
func (s *Set) AssignStringsSticky(dst []int32, vals []string, o Outcomes, docs StickyDocs, changes []StickyChange) ([]int32, []StickyChange) {
	var stack [32]string
	strs := s.strings(&stack, vals, o)
	var docStack [32]map[string]string
	byslot := s.stickyDocs(docStack[:0], docs, nil, nil, strs)
	var u unitHash
	for i, g := range s.gate {
		if g == gateShut || g >= 0 && o[g] == condFalse && byslot == nil {
			dst = append(dst, -1)
			continue
		}
		v := int32(-1)
		c := &s.exps[i]
		attr, hv := c.hashInput(nil, nil, strs)
		sb, held := stickyNone, stickyNone
		if byslot != nil && c.sticky != nil && hv != "" {
			sb, held = c.stickyBucket(byslot, attr != c.hashAttr)
		}
		if variation, in, used := c.decide(hv, sb, nil, nil, strs, o, &u); in {
			v = int32(variation)
			if c.sticky != nil && used&usedHash != 0 {
				changes = c.record(changes, i, attr, hv, variation, held)
			}
		}
		dst = append(dst, v)
	}
	return dst, changes
}

// strings checks AssignStrings' arguments and returns the values by slot,
// in stack when they fit.
func (s *Set) strings(stack *[32]string, vals []string, o Outcomes) []string {
	if len(o) != len(s.byCond) || len(vals) != len(s.refs) {
		panic("engine: AssignStrings: outcomes or values not of this set")
	}
	strs := stack[:0]
	if len(s.slots) > len(stack) {
		strs = make([]string, 0, len(s.slots))
	}
	strs = strs[:len(s.slots)]
	for i, v := range vals {
		strs[s.refSlot[i]] = v
	}
	return strs
}

// Referenced returns the attribute names the compiled set reads, sorted: hash
// and fallback attributes, filter attributes, and the top-level name of every
// attribute path a condition reads ("a" for "a.b"). A cache of assignments
// may be keyed by their values alone.
func (s *Set) Referenced() []string { return slices.Clone(s.refs) }
