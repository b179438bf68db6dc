// Package engine is Allot's pure assignment engine: it compiles experiment
// definitions (GrowthBook's SDK experiment model) and
// assigns units to variations deterministically.
//
// The engine imports only the standard library, filter/internal/jsonx and
// filter/internal/regex.
// It is compiled into the GOOS=wasip1 filter: it must never import os, net,
// fmt, encoding/json, regexp, time or anything that pulls them in. Every
// megabyte of Wasm module costs Envoy about 16 MiB of RSS, so make
// check-deps keeps them out of the module. The Wasm filter and the control
// plane both call Compile,
// so what the admin API accepts is exactly what the proxies run.
//
// Semantics follow GrowthBook's SDK experiment model and are checked against
// its cross-language spec suite (see conformance_test.go). Where the
// reference silently repairs invalid input — weights that do not sum to 1,
// coverage outside [0, 1], unknown operators, invalid regular expressions —
// Compile rejects the definition instead and names every problem with its
// field path. Documented deviations from the JavaScript reference:
//
//   - Regular expressions use Go's RE2 syntax (filter/internal/regex): no
//     lookaround, no backreferences, no Unicode classes such as \p{L}
//     (Compile rejects them). Patterns match code points, where JavaScript
//     without the u flag matches UTF-16 code units (`.` takes a whole
//     emoji), and (?i) folds by unicode.SimpleFold orbits, not by
//     JavaScript's Canonicalize.
//   - Lower-casing ($ini, $nini, $alli) uses Go's Unicode tables, 15.0 in
//     Go 1.26, older than Node 20's (17.0): the 55 upper-case letters
//     assigned since do not lower-case, and U+0295 and U+1171E keep their
//     15.0 properties (TestVectorsLower lists the gap).
//   - Equality of a condition object with an attribute object ignores key
//     order (JSON.stringify in the reference does not).
//   - An experiment needs at least two variations: the reference never
//     includes anyone in a one-variation experiment, so such a definition is
//     a mistake and Compile rejects it.
//   - The engine has no status or "active" switch: the control plane sends a
//     proxy running experiments only, so a draft, paused or stopped
//     experiment assigns nobody, even when forced.
package engine

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// Experiment is one experiment definition as a proxy evaluates it:
// GrowthBook's experiment model, in its JSON field names. What only the
// control plane acts on (status, schedule, owner, services, description) is
// not part of it: the control plane sends running experiments only.
type Experiment struct {
	// Key names the experiment; it becomes a header-name suffix, so it must
	// match ^[a-z][a-z0-9._-]{0,62}$ and be unique in a Config.
	Key string `json:"key"`
	// Variations are the variation values (header values): strings, or
	// numbers and booleans rendered canonically (1, 1.5, true). At least two.
	Variations []RawMessage `json:"variations"`
	// Weights split traffic between variations; they must sum to 1.
	// Absent means equal weights.
	Weights []float64 `json:"weights,omitempty"`
	// Coverage is the fraction of units included, in [0, 1]; absent means 1.
	Coverage *float64 `json:"coverage,omitempty"`
	// HashAttribute is the attribute hashed to bucket a unit; default "id".
	HashAttribute string `json:"hashAttribute,omitempty"`
	// FallbackAttribute is hashed when HashAttribute is missing or empty.
	FallbackAttribute string `json:"fallbackAttribute,omitempty"`
	// HashVersion selects GrowthBook's hash: 1 (default) or 2.
	HashVersion int `json:"hashVersion,omitempty"`
	// Seed is hashed with the attribute value; default Key.
	Seed string `json:"seed,omitempty"`
	// Namespace is [id, start, end]: only units whose namespace hash falls
	// in [start, end) are eligible (for mutually exclusive experiments).
	Namespace RawMessage `json:"namespace,omitempty"`
	// Condition is a GrowthBook targeting condition over attributes.
	Condition RawMessage `json:"condition,omitempty"`
	// Force, when set, serves that variation index to every eligible unit.
	Force *int `json:"force,omitempty"`
	// Filters is a list of {seed, ranges, attribute, hashVersion}: a unit is
	// eligible only if it lands in some range of every filter. Filters
	// replace Namespace.
	Filters RawMessage `json:"filters,omitempty"`
	// Ranges give each variation's bucket range directly, replacing
	// Weights and Coverage.
	Ranges [][]float64 `json:"ranges,omitempty"`
}

// Filter is one element of Experiment.Filters.
type Filter struct {
	// Attribute is hashed; default "id".
	Attribute string `json:"attribute,omitempty"`
	// Seed is hashed with the attribute value.
	Seed string `json:"seed"`
	// HashVersion is 1 or 2; default 2 (as in GrowthBook).
	HashVersion int `json:"hashVersion,omitempty"`
	// Ranges are [start, end) ranges; the hash must fall in one of them.
	Ranges [][]float64 `json:"ranges"`
}

// Config is everything Compile needs: the experiments and the saved groups
// their conditions may reference with $inGroup / $notInGroup.
type Config struct {
	Experiments []Experiment          `json:"experiments"`
	SavedGroups map[string]RawMessage `json:"savedGroups,omitempty"`
}

// Attributes are a unit's attribute values, JSON-typed (string, float64,
// bool, nil, []any, map[string]any). The filter passes strings only.
type Attributes map[string]any

// Assignment is the result of evaluating one experiment for one unit.
type Assignment struct {
	// Key is the experiment key.
	Key string
	// VariationID indexes the variations; 0 when not in the experiment.
	VariationID int
	// Value is the rendered variation (the header value); the first
	// variation's when not in the experiment, as in GrowthBook.
	Value string
	// InExperiment reports whether the unit is included.
	InExperiment bool
	// HashUsed reports whether the variation came from the hash (false when
	// forced or not included).
	HashUsed bool
	// HashAttribute is the attribute whose value was (or would be) hashed.
	HashAttribute string
	// HashValue is the value that was (or would be) hashed; empty if missing.
	HashValue string
}

// Set is a compiled, immutable set of experiments, safe for concurrent use.
type Set struct {
	// conds counts the distinct conditions (by compacted JSON); experiments
	// sharing a condition share its id, and Assign evaluates it at most once.
	conds int
	exps  []compiled
	keys  []string
	refs  []string // sorted attribute names
	slots []string // attribute names by slot index
	// refSlot[i] is the slot of refs[i].
	refSlot []int
	// condRefs are the sorted top-level names conditions read; byCond[id]
	// is the condition with that id.
	condRefs []string
	byCond   []*Condition
	// gate[i] is what AssignStrings checks before it reads experiment i:
	// gateOpen (no condition), gateShut (never assigns: fewer than two
	// variations) or the id of its condition, whose outcome
	// decides. A request's excluded experiments then cost a 4-byte read
	// each, not a call that reads their compiled form (natively a cold
	// request with 50 experiments 12% faster; in Envoy below what
	// bench-compare resolves: bench/README.md).
	gate []int32
}

// Gate values besides condition ids.
const (
	gateOpen int32 = -1
	gateShut int32 = -2
)

// compiled is one experiment, ready to evaluate.
type compiled struct {
	key          string
	values       []string
	ranges       [][2]float64
	hashAttr     string
	fallbackAttr string
	hashSlot     int
	fallbackSlot int // -1 without a fallback attribute
	hashVersion  int
	seed         string
	seedState    uint32 // fnv1a(offset, seed): hash version 2's prefix
	hasNS        bool
	nsID         string
	nsStart      float64
	nsEnd        float64
	cond         *Condition
	condID       int // index of cond among the set's distinct conditions
	hasForce     bool
	force        int
	filters      []compiledFilter
}

type compiledFilter struct {
	attr        string
	slot        int
	seed        string
	seedState   uint32
	hashVersion int
	ranges      [][2]float64
}

// FieldError is one validation problem at a field path such as
// "experiments[2].weights".
type FieldError struct {
	Path    string
	Message string
}

// Error implements error as "path: message".
func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

// Compile validates every definition and compiles the set. It reports every
// problem at once, each as a *FieldError joined with errors.Join, in
// definition order.
func Compile(cfg Config) (*Set, error) {
	groups, errs := compileGroups(cfg.SavedGroups)
	s := &Set{
		exps: make([]compiled, 0, len(cfg.Experiments)),
		keys: make([]string, 0, len(cfg.Experiments)),
	}
	seen := map[string]int{}
	conds := map[string]int{} // compacted condition JSON → condition id
	slots := newSlots()
	var condRefs []string
	for i := range cfg.Experiments {
		e := &cfg.Experiments[i]
		p := "experiments[" + strconv.Itoa(i) + "]"
		c, eerrs := compileExperiment(p, e, groups, slots)
		errs = append(errs, eerrs...)
		if c.cond != nil {
			key := string(jsonx.Compact(nil, e.Condition))
			id, ok := conds[key]
			if !ok {
				id = len(conds)
				conds[key] = id
				s.byCond = append(s.byCond, c.cond)
				condRefs = append(condRefs, c.cond.refs...)
			}
			c.condID = id
		}
		if j, dup := seen[e.Key]; dup && e.Key != "" {
			errs = append(errs, &FieldError{p + ".key", "duplicate key " + strconv.Quote(e.Key) + " (also experiments[" + strconv.Itoa(j) + "])"})
		} else {
			seen[e.Key] = i
		}
		s.exps = append(s.exps, c)
		s.keys = append(s.keys, e.Key)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.conds = len(conds)
	s.slots = slots.names
	s.refs = slices.Sorted(slices.Values(slots.names))
	for _, name := range s.refs {
		s.refSlot = append(s.refSlot, slots.ids[name])
	}
	slices.Sort(condRefs)
	s.condRefs = slices.Compact(condRefs)
	s.gate = make([]int32, len(s.exps))
	for i := range s.exps {
		c := &s.exps[i]
		switch {
		case len(c.values) < 2:
			s.gate[i] = gateShut
		case c.cond != nil:
			s.gate[i] = int32(c.condID)
		default:
			s.gate[i] = gateOpen
		}
	}
	return s, nil
}

// compileExperiment validates e (errors under path p) and compiles it. The
// compiled experiment is always usable and behaves like GrowthBook's
// reference on invalid input (equal weights for bad weights, clamped
// coverage, out-of-range force excluded, ...); Compile discards it when
// there are errors, the conformance test runs it.
func compileExperiment(p string, e *Experiment, groups map[string][]any, slots *slotTable) (compiled, []error) {
	var errs []error
	fail := func(path, msg string) {
		errs = append(errs, &FieldError{p + path, msg})
	}
	c := compiled{
		key:          e.Key,
		hashAttr:     e.HashAttribute,
		fallbackAttr: e.FallbackAttribute,
		hashVersion:  e.HashVersion,
		seed:         e.Seed,
	}
	if c.hashAttr == "" {
		c.hashAttr = "id"
	}
	c.hashSlot, c.fallbackSlot = slots.index(c.hashAttr), -1
	if c.fallbackAttr != "" {
		c.fallbackSlot = slots.index(c.fallbackAttr)
	}
	if c.hashVersion == 0 {
		c.hashVersion = 1
	}
	if c.seed == "" {
		c.seed = e.Key
	}
	c.seedState = fnv1a(fnvOffset32, c.seed)

	if e.Key == "" {
		fail(".key", "is required")
	} else if !validKey(e.Key) {
		fail(".key", strconv.Quote(e.Key)+" must match ^[a-z][a-z0-9._-]{0,62}$")
	}

	n := len(e.Variations)
	if n < 2 {
		fail(".variations", "got "+strconv.Itoa(n)+" variations, want at least 2")
	}
	for j, raw := range e.Variations {
		v, msg := renderVariation(raw)
		if msg != "" {
			fail(".variations["+strconv.Itoa(j)+"]", msg)
		}
		c.values = append(c.values, v)
	}

	if e.Weights != nil {
		if len(e.Weights) != n {
			fail(".weights", "got "+strconv.Itoa(len(e.Weights))+" weights for "+strconv.Itoa(n)+" variations")
		}
		sum, ok := 0.0, true
		for j, w := range e.Weights {
			if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
				fail(".weights["+strconv.Itoa(j)+"]", formatG(w)+" is negative or not finite")
				ok = false
			}
			sum += w
		}
		if ok && math.Abs(sum-1) > 1e-6 {
			fail(".weights", "sum "+strconv.FormatFloat(sum, 'g', 10, 64)+", want 1")
		}
	}
	coverage := 1.0
	if e.Coverage != nil {
		coverage = *e.Coverage
		if !(coverage >= 0 && coverage <= 1) {
			fail(".coverage", formatG(coverage)+" is outside [0, 1]")
		}
	}
	if c.hashVersion != 1 && c.hashVersion != 2 {
		fail(".hashVersion", "unknown hash version "+strconv.Itoa(e.HashVersion)+", want 1 or 2")
	}
	if e.HashAttribute != "" && strings.TrimSpace(e.HashAttribute) != e.HashAttribute {
		fail(".hashAttribute", strconv.Quote(e.HashAttribute)+" has surrounding spaces")
	}

	if e.Ranges != nil {
		if e.Weights != nil || e.Coverage != nil {
			fail(".ranges", "ranges replace weights and coverage; set one or the other")
		}
		if len(e.Ranges) != n {
			fail(".ranges", "got "+strconv.Itoa(len(e.Ranges))+" ranges for "+strconv.Itoa(n)+" variations")
		}
		c.ranges = compileRanges(p+".ranges", e.Ranges, &errs, true)
	} else {
		c.ranges = BucketRanges(n, coverage, e.Weights)
	}

	if len(e.Namespace) > 0 && string(e.Namespace) != "null" {
		c.hasNS = true
		c.nsStart, c.nsEnd = math.NaN(), math.NaN() // malformed: nobody is in
		v, err := jsonx.Parse(e.Namespace)
		if ns, _ := v.([]any); err != nil || len(ns) != 3 {
			fail(".namespace", "must be [id, start, end]")
		} else {
			id, ok1 := ns[0].(string)
			start, ok2 := ns[1].(float64)
			end, ok3 := ns[2].(float64)
			switch {
			case !ok1 || !ok2 || !ok3:
				fail(".namespace", "must be [id (string), start (number), end (number)]")
			case id == "":
				fail(".namespace[0]", "namespace id is empty")
			case !(start >= 0 && start <= end && end <= 1):
				fail(".namespace", "range ["+formatG(start)+", "+formatG(end)+") must satisfy 0 <= start <= end <= 1")
			}
			if ok1 && ok2 && ok3 {
				c.nsID, c.nsStart, c.nsEnd = id, start, end
			}
		}
	}

	cond, cerrs := compileCondition(p+".condition", e.Condition, groups, slots)
	errs = append(errs, cerrs...)
	c.cond = cond

	if e.Force != nil {
		c.hasForce, c.force = true, *e.Force
		if c.force < 0 || c.force >= n {
			fail(".force", strconv.Itoa(c.force)+" is not a variation index in [0, "+strconv.Itoa(n)+")")
		}
	}

	c.filters = compileFilters(p+".filters", e.Filters, &errs)
	for i := range c.filters {
		c.filters[i].slot = slots.index(c.filters[i].attr)
	}

	return c, errs
}

// compileRanges converts [start, end] pairs; malformed pairs match nothing.
func compileRanges(p string, in [][]float64, errs *[]error, noOverlap bool) [][2]float64 {
	out := make([][2]float64, len(in))
	for j, r := range in {
		rp := p + "[" + strconv.Itoa(j) + "]"
		if len(r) != 2 {
			*errs = append(*errs, &FieldError{rp, "got " + strconv.Itoa(len(r)) + " numbers, want [start, end]"})
			out[j] = [2]float64{math.NaN(), math.NaN()}
			continue
		}
		if !(r[0] >= 0 && r[0] <= r[1] && r[1] <= 1) {
			*errs = append(*errs, &FieldError{rp, "[" + formatG(r[0]) + ", " + formatG(r[1]) + "] must satisfy 0 <= start <= end <= 1"})
		}
		out[j] = [2]float64{r[0], r[1]}
	}
	if noOverlap {
		for a := range out {
			for b := a + 1; b < len(out); b++ {
				if out[a][0] < out[b][1] && out[b][0] < out[a][1] {
					*errs = append(*errs, &FieldError{p + "[" + strconv.Itoa(b) + "]", "overlaps " + p[strings.LastIndexByte(p, '.')+1:] + "[" + strconv.Itoa(a) + "]"})
				}
			}
		}
	}
	return out
}

func compileFilters(p string, raw RawMessage, errs *[]error) []compiledFilter {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	v, err := jsonx.ParseOrdered(raw)
	fs, ok := v.([]any)
	if err != nil || !ok && v != nil {
		*errs = append(*errs, &FieldError{p, "must be an array of {seed, ranges, attribute, hashVersion}"})
		return []compiledFilter{{attr: "id", hashVersion: -1}} // excludes everyone
	}
	out := make([]compiledFilter, 0, len(fs))
	for j, fr := range fs {
		fp := p + "[" + strconv.Itoa(j) + "]"
		f, err := decodeFilter(fr)
		if err != nil {
			*errs = append(*errs, &FieldError{fp, "invalid filter: " + err.Error()})
			out = append(out, compiledFilter{attr: "id", hashVersion: -1})
			continue
		}
		cf := compiledFilter{attr: f.Attribute, seed: f.Seed, seedState: fnv1a(fnvOffset32, f.Seed), hashVersion: f.HashVersion}
		if cf.attr == "" {
			cf.attr = "id"
		}
		if cf.hashVersion == 0 {
			cf.hashVersion = 2
		}
		if cf.hashVersion != 1 && cf.hashVersion != 2 {
			*errs = append(*errs, &FieldError{fp + ".hashVersion", "unknown hash version " + strconv.Itoa(f.HashVersion) + ", want 1 or 2"})
		}
		if f.Seed == "" {
			*errs = append(*errs, &FieldError{fp + ".seed", "is required"})
		}
		if len(f.Ranges) == 0 {
			*errs = append(*errs, &FieldError{fp + ".ranges", "at least one range is required"})
		}
		cf.ranges = compileRanges(fp+".ranges", f.Ranges, errs, false)
		out = append(out, cf)
	}
	return out
}

// decodeFilter decodes one element of Experiment.Filters as encoding/json
// decodes a Filter with unknown fields disallowed (names match
// case-insensitively; null is the zero Filter).
func decodeFilter(v any) (Filter, error) {
	var f Filter
	if v == nil {
		return f, nil
	}
	obj, ok := v.(jsonx.Object)
	if !ok {
		return f, errors.New("want an object")
	}
	var d jsonx.Decoder
	for _, m := range obj {
		switch jsonx.FoldName(m.Key) {
		case "ATTRIBUTE":
			d.String("attribute", m.Value, &f.Attribute)
		case "SEED":
			d.String("seed", m.Value, &f.Seed)
		case "HASHVERSION":
			d.Int("hashVersion", m.Value, &f.HashVersion)
		case "RANGES":
			d.FloatMatrix("ranges", m.Value, &f.Ranges)
		default:
			return f, errors.New("unknown field " + strconv.Quote(m.Key))
		}
	}
	if len(d.Errs) > 0 {
		return f, d.Errs[0]
	}
	return f, nil
}

// renderVariation renders a variation as its header value; msg explains why
// it is invalid (the lenient rendering is still returned).
func renderVariation(raw RawMessage) (value, msg string) {
	v, err := jsonx.Parse(raw)
	if err != nil {
		return string(raw), "invalid JSON: " + err.Error()
	}
	switch x := v.(type) {
	case string:
		for i := 0; i < len(x); i++ {
			if c := x[i]; (c < 0x20 && c != '\t') || c == 0x7f {
				return x, "contains control characters; not a valid header value"
			}
		}
		return x, ""
	case float64:
		return formatNumber(x), ""
	case bool:
		return strconv.FormatBool(x), ""
	case nil:
		return "", "must be a string, number or boolean, got null"
	}
	return string(raw), "must be a string, number or boolean, got " + typeName(v)
}

// formatG is fmt's %g: the shortest representation, exponent form for
// large and small magnitudes.
func formatG(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// validKey reports whether k matches ^[a-z][a-z0-9._-]{0,62}$. The key is a
// header-name suffix and a key of the RFC 9651 dictionary header, whose keys
// must start with a lowercase letter.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 63 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', i > 0 && c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// eval is GrowthBook's run(experiment) minus the SDK-only steps (URL
// targeting, query-string and context overrides, QA mode, sticky buckets,
// prerequisites). It fills the zero Assignment r in place.
// Condition results memoized during one Assign, by condition id.
const (
	condUnknown int8 = iota
	condTrue
	condFalse
)

func (c *compiled) eval(r *Assignment, attrs map[string]any, slots []any, strs []string, memo []int8, u *unitHash) {
	r.Key = c.key
	r.HashAttribute, r.HashValue = c.hashInput(attrs, slots, strs)
	r.VariationID, r.InExperiment, r.HashUsed = c.decide(r.HashValue, attrs, slots, strs, memo, u)
	if len(c.values) > 0 {
		r.Value = c.values[r.VariationID]
	}
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

// decide places the unit whose hash input is hv: the variation index and
// whether it is in the experiment and by the hash. It returns scalars only,
// so AssignStrings writes nothing with pointers (which, while the
// collector marks, would each pay a write barrier).
func (c *compiled) decide(hv string, attrs map[string]any, slots []any, strs []string, memo []int8, u *unitHash) (variation int, in, hashUsed bool) {
	if len(c.values) < 2 || hv == "" {
		return 0, false, false
	}
	// A condition already known to be false excludes the unit before any
	// hashing: every check from here on only excludes, so their order does
	// not change the result.
	if c.cond != nil && c.condID < len(memo) && memo[c.condID] == condFalse {
		return 0, false, false
	}
	if len(c.filters) > 0 {
		if c.filteredOut(attrs, slots, strs, u) {
			return 0, false, false
		}
	} else if c.hasNS {
		if n := nsHash(hv, c.nsID); !(n >= c.nsStart && n < c.nsEnd) {
			return 0, false, false
		}
	}
	if c.cond != nil && !c.matches(attrs, slots, memo) {
		return 0, false, false
	}
	n, ok := u.hash(c.seed, c.seedState, hv, c.hashVersion)
	if !ok {
		return 0, false, false
	}
	idx := ChooseVariation(n, c.ranges)
	if idx < 0 {
		return 0, false, false
	}
	if c.hasForce {
		if c.force >= 0 && c.force < len(c.values) {
			return c.force, true, false
		}
		return 0, false, false
	}
	if idx < len(c.values) {
		return idx, true, true
	}
	return 0, false, true
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
// allocate beyond growing dst when attributes are strings.
func (s *Set) Assign(dst []Assignment, attrs Attributes) []Assignment {
	m := map[string]any(attrs)
	// Look every referenced attribute up once; experiments read them by slot.
	var stack [32]any
	slots := stack[:0]
	if len(s.slots) > len(stack) {
		slots = make([]any, 0, len(s.slots))
	}
	for _, name := range s.slots {
		slots = append(slots, m[name])
	}
	var memoStack [128]int8
	memo := memoStack[:min(s.conds, len(memoStack))] // more distinct conditions than that: the rest are not memoized
	var u unitHash
	for i := range s.exps {
		c := &s.exps[i]
		dst = append(dst, Assignment{})
		c.eval(&dst[len(dst)-1], m, slots, nil, memo, &u)
	}
	return dst
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
	if len(o) != len(s.byCond) || len(vals) != len(s.refs) {
		panic("engine: AssignStrings: outcomes or values not of this set")
	}
	var stack [32]string
	strs := stack[:0]
	if len(s.slots) > len(stack) {
		strs = make([]string, 0, len(s.slots))
	}
	strs = strs[:len(s.slots)]
	for i, v := range vals {
		strs[s.refSlot[i]] = v
	}
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
		if variation, in, _ := c.decide(hv, nil, nil, strs, o, &u); in {
			v = int32(variation)
		}
		dst = append(dst, v)
	}
	return dst
}

// Referenced returns the attribute names the compiled set reads, sorted: hash
// and fallback attributes, filter attributes, and the top-level name of every
// attribute path a condition reads ("a" for "a.b"). A cache of assignments
// may be keyed by their values alone.
func (s *Set) Referenced() []string { return slices.Clone(s.refs) }
