package engine

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

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
	s.compileSticky(cfg.Experiments)
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
// there are errors, the conformance test runs it. The checks run, and
// report, in the order of the fields: key, variations, the bucketing
// (weights, coverage, hashing, bucket versions, ranges), namespace,
// condition, force, filters.
func compileExperiment(p string, e *Experiment, groups map[string][]any, slots *slotTable) (compiled, []error) {
	f := &fieldErrors{prefix: p}
	c := newCompiled(e, slots)
	checkKey(f, e.Key)
	c.compileVariations(f, e.Variations)
	n := len(e.Variations)
	coverage := checkBucketing(f, e, c.hashVersion)
	if e.Ranges != nil {
		if e.Weights != nil || e.Coverage != nil {
			f.add(".ranges", "ranges replace weights and coverage; set one or the other")
		}
		if len(e.Ranges) != n {
			f.add(".ranges", "got "+strconv.Itoa(len(e.Ranges))+" ranges for "+strconv.Itoa(n)+" variations")
		}
		c.ranges = compileRanges(p+".ranges", e.Ranges, &f.errs, true)
	} else {
		c.ranges = BucketRanges(n, coverage, e.Weights)
	}
	c.compileNamespace(f, e.Namespace)

	cond, cerrs := compileCondition(p+".condition", e.Condition, groups, slots)
	f.errs = append(f.errs, cerrs...)
	c.cond = cond

	if e.Force != nil {
		c.hasForce, c.force = true, *e.Force
		if c.force < 0 || c.force >= n {
			f.add(".force", strconv.Itoa(c.force)+" is not a variation index in [0, "+strconv.Itoa(n)+")")
		}
	}

	c.filters = compileFilters(p+".filters", e.Filters, &f.errs)
	for i := range c.filters {
		c.filters[i].slot = slots.index(c.filters[i].attr)
	}
	return c, f.errs
}

// fieldErrors collects the validation errors of one experiment, each a
// *FieldError at prefix + its path.
type fieldErrors struct {
	prefix string
	errs   []error
}

// add records msg at the experiment's field path. Not inlined: each of
// its 20 call sites would carry the append (inlined, bin/allot.wasm was
// 16.6 KB larger: 3,074,241 bytes against 3,057,668).
//
//go:noinline
func (f *fieldErrors) add(path, msg string) {
	f.errs = append(f.errs, &FieldError{f.prefix + path, msg})
}

// newCompiled is e's identity and hashing with their defaults filled in:
// the key, the hash and fallback attributes (and their slots), the hash
// version and the seed.
func newCompiled(e *Experiment, slots *slotTable) compiled {
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
	return c
}

// checkKey checks the experiment's key.
func checkKey(f *fieldErrors, key string) {
	if key == "" {
		f.add(".key", "is required")
	} else if !validKey(key) {
		f.add(".key", strconv.Quote(key)+" must match ^[a-z][a-z0-9._-]{0,62}$")
	}
}

// compileVariations renders each variation's header value; there must be
// at least two.
func (c *compiled) compileVariations(f *fieldErrors, variations []RawMessage) {
	n := len(variations)
	if n < 2 {
		f.add(".variations", "got "+strconv.Itoa(n)+" variations, want at least 2")
	}
	for j, raw := range variations {
		v, msg := renderVariation(raw)
		if msg != "" {
			f.add(".variations["+strconv.Itoa(j)+"]", msg)
		}
		c.values = append(c.values, v)
	}
}

// checkBucketing checks how e's units are bucketed — weights, coverage,
// hash version and attribute, bucket versions — and returns its coverage
// (1 when unset). hashVersion is e's with its default.
func checkBucketing(f *fieldErrors, e *Experiment, hashVersion int) (coverage float64) {
	n := len(e.Variations)
	if e.Weights != nil {
		if len(e.Weights) != n {
			f.add(".weights", "got "+strconv.Itoa(len(e.Weights))+" weights for "+strconv.Itoa(n)+" variations")
		}
		sum, ok := 0.0, true
		for j, w := range e.Weights {
			if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
				f.add(".weights["+strconv.Itoa(j)+"]", formatG(w)+" is negative or not finite")
				ok = false
			}
			sum += w
		}
		if ok && math.Abs(sum-1) > 1e-6 {
			f.add(".weights", "sum "+strconv.FormatFloat(sum, 'g', 10, 64)+", want 1")
		}
	}
	coverage = 1.0
	if e.Coverage != nil {
		coverage = *e.Coverage
		if !(coverage >= 0 && coverage <= 1) {
			f.add(".coverage", formatG(coverage)+" is outside [0, 1]")
		}
	}
	if hashVersion != 1 && hashVersion != 2 {
		f.add(".hashVersion", "unknown hash version "+strconv.Itoa(e.HashVersion)+", want 1 or 2")
	}
	if e.HashAttribute != "" && strings.TrimSpace(e.HashAttribute) != e.HashAttribute {
		f.add(".hashAttribute", strconv.Quote(e.HashAttribute)+" has surrounding spaces")
	}
	if e.BucketVersion < 0 {
		f.add(".bucketVersion", strconv.Itoa(e.BucketVersion)+" is negative")
	}
	switch {
	case e.MinBucketVersion < 0:
		f.add(".minBucketVersion", strconv.Itoa(e.MinBucketVersion)+" is negative")
	case e.MinBucketVersion > max(e.BucketVersion, 0):
		f.add(".minBucketVersion", strconv.Itoa(e.MinBucketVersion)+" is above bucketVersion "+strconv.Itoa(e.BucketVersion)+
			": every unit's new sticky bucket would be blocked")
	}
	return coverage
}

// compileNamespace compiles the experiment's namespace, [id, start, end];
// a malformed one lets nobody in.
func (c *compiled) compileNamespace(f *fieldErrors, raw RawMessage) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	c.hasNS = true
	c.nsStart, c.nsEnd = math.NaN(), math.NaN() // malformed: nobody is in
	v, err := jsonx.Parse(raw)
	ns, _ := v.([]any)
	if err != nil || len(ns) != 3 {
		f.add(".namespace", "must be [id, start, end]")
		return
	}
	id, ok1 := ns[0].(string)
	start, ok2 := ns[1].(float64)
	end, ok3 := ns[2].(float64)
	switch {
	case !ok1 || !ok2 || !ok3:
		f.add(".namespace", "must be [id (string), start (number), end (number)]")
	case id == "":
		f.add(".namespace[0]", "namespace id is empty")
	case !(start >= 0 && start <= end && end <= 1):
		f.add(".namespace", "range ["+formatG(start)+", "+formatG(end)+") must satisfy 0 <= start <= end <= 1")
	}
	if ok1 && ok2 && ok3 {
		c.nsID, c.nsStart, c.nsEnd = id, start, end
	}
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

// decodeFilter decodes one element of Experiment.Filters by GrowthBook's
// field names, exactly as its SDKs read them (case-sensitive); an unknown
// field is an error, null the zero Filter.
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
		switch m.Key {
		case "attribute":
			d.String("attribute", m.Value, &f.Attribute)
		case "seed":
			d.String("seed", m.Value, &f.Seed)
		case "hashVersion":
			d.Int("hashVersion", m.Value, &f.HashVersion)
		case "ranges":
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

// RenderVariation returns a variation as the filter writes it into its
// assignment header: a string as is, a number or boolean canonically. The
// error says why raw is not a valid header value. Compile renders every
// variation this way; the control plane measures header sizes with it.
func RenderVariation(raw RawMessage) (string, error) {
	v, msg := renderVariation(raw)
	if msg != "" {
		return v, errors.New(msg)
	}
	return v, nil
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
