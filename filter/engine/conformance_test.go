package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The conformance test runs GrowthBook's cross-language SDK spec suite
// (cases.json, spec 0.8.0) against the engine. The file is not vendored: set
// ALLOT_GROWTHBOOK_CASES to its path. The test skips when the variable is
// unset and fails when it is set but the file cannot be read.
//
// Primitives run directly (Hash, BucketRanges, ChooseVariation, InNamespace,
// EqualWeights, condition evaluation) and reproduce the reference even on
// invalid input. "run" cases go through compileExperiment's lenient result —
// the same evaluation Compile's sets use, keeping raw variation values — and,
// whenever Compile accepts the definition, through Compile and Set.Assign too.
// "stickyBucket" cases express their experiment as a feature's rules: each
// rule becomes the experiment GrowthBook's evalFeature builds from it, run
// with AssignSticky (and AssignStringsSticky) over the documents a GrowthBook
// client would load for the unit. Only cases needing SDK-only features are
// skipped, each with its reason.

const casesEnv = "ALLOT_GROWTHBOOK_CASES"

// conformanceSummary is printed by TestMain after all tests ran, so it is the
// last thing `go test -v | tail` shows.
var conformanceSummary string

func TestMain(m *testing.M) {
	code := m.Run()
	if conformanceSummary != "" {
		fmt.Print(conformanceSummary)
	}
	os.Exit(code)
}

type tally struct{ pass, skip, fail int }

func TestConformance(t *testing.T) {
	path := os.Getenv(casesEnv)
	if path == "" {
		t.Skip(casesEnv + " is unset; set it to GrowthBook's cases.json to run the conformance suite")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", casesEnv, err)
	}
	var suite map[string]RawMessage
	if err := json.Unmarshal(data, &suite); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	var version string
	_ = json.Unmarshal(suite["specVersion"], &version)
	t.Logf("GrowthBook spec version %s", version)

	sections := []struct {
		name string
		run  func(t *testing.T, c []RawMessage)
		// caseName names a case (most cases carry their name first).
		caseName func(c []RawMessage) string
	}{
		{"hash", confHash, func(c []RawMessage) string {
			return fmt.Sprintf("%s|%s|v%s", str(c[0]), str(c[1]), string(c[2]))
		}},
		{"getBucketRange", confBucketRange, nil},
		{"chooseVariation", confChooseVariation, nil},
		{"inNamespace", confInNamespace, nil},
		{"getEqualWeights", confEqualWeights, func(c []RawMessage) string { return "n=" + string(c[0]) }},
		{"evalCondition", confEvalCondition, nil},
		{"run", confRun, nil},
		{"stickyBucket", confStickyBucket, nil},
	}
	counts := map[string]*tally{}
	for _, sec := range sections {
		raw, ok := suite[sec.name]
		if !ok {
			t.Errorf("section %q missing from %s", sec.name, path)
			continue
		}
		var cases [][]RawMessage
		if err := json.Unmarshal(raw, &cases); err != nil {
			t.Errorf("decode section %q: %v", sec.name, err)
			continue
		}
		tl := &tally{}
		counts[sec.name] = tl
		t.Run(sec.name, func(t *testing.T) {
			for _, c := range cases {
				name := ""
				if sec.caseName != nil {
					name = sec.caseName(c)
				} else {
					name = str(c[0])
				}
				t.Run(name, func(t *testing.T) {
					defer func() {
						switch {
						case t.Skipped():
							tl.skip++
						case t.Failed():
							tl.fail++
						default:
							tl.pass++
						}
					}()
					sec.run(t, c)
				})
			}
		})
	}
	var sb strings.Builder
	sb.WriteString("GrowthBook conformance (spec " + version + "):\n")
	for _, sec := range sections {
		if tl := counts[sec.name]; tl != nil {
			fmt.Fprintf(&sb, "  %-16s passed %3d  skipped %2d  failed %d\n", sec.name, tl.pass, tl.skip, tl.fail)
		}
	}
	conformanceSummary = sb.String()
	t.Log("\n" + conformanceSummary)
}

func str(raw RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw)
	}
	return s
}

func decode[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// confHash: [seed, value, version, expected|null].
func confHash(t *testing.T, c []RawMessage) {
	seed, value := decode[string](t, c[0]), decode[string](t, c[1])
	version := decode[int](t, c[2])
	want := decode[*float64](t, c[3])
	got, ok := Hash(seed, value, version)
	switch {
	case want == nil && ok:
		t.Errorf("Hash(%q, %q, %d) = %v, want null", seed, value, version, got)
	case want != nil && (!ok || !near(got, *want, 1e-12)):
		t.Errorf("Hash(%q, %q, %d) = %v, %v, want %v", seed, value, version, got, ok, *want)
	}
}

// confBucketRange: [name, [numVariations, coverage, weights|null], expected].
func confBucketRange(t *testing.T, c []RawMessage) {
	args := decode[[]RawMessage](t, c[1])
	n := decode[int](t, args[0])
	coverage := decode[float64](t, args[1])
	weights := decode[[]float64](t, args[2])
	want := decode[[][2]float64](t, c[2])
	got := BucketRanges(n, coverage, weights)
	if !rangesNear(got, want) {
		t.Errorf("BucketRanges(%d, %v, %v) = %v, want %v", n, coverage, weights, got, want)
	}
}

func rangesNear(got, want [][2]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !near(got[i][0], want[i][0], 1e-9) || !near(got[i][1], want[i][1], 1e-9) {
			return false
		}
	}
	return true
}

// confChooseVariation: [name, n, ranges, expected].
func confChooseVariation(t *testing.T, c []RawMessage) {
	n := decode[float64](t, c[1])
	ranges := decode[[][2]float64](t, c[2])
	want := decode[int](t, c[3])
	if got := ChooseVariation(n, ranges); got != want {
		t.Errorf("ChooseVariation(%v, %v) = %d, want %d", n, ranges, got, want)
	}
}

// confInNamespace: [name, id, [namespace, start, end], expected].
func confInNamespace(t *testing.T, c []RawMessage) {
	id := decode[string](t, c[1])
	ns := decode[[]RawMessage](t, c[2])
	want := decode[bool](t, c[3])
	nsID, start, end := decode[string](t, ns[0]), decode[float64](t, ns[1]), decode[float64](t, ns[2])
	if got := InNamespace(id, nsID, start, end); got != want {
		t.Errorf("InNamespace(%q, [%q, %v, %v]) = %v, want %v", id, nsID, start, end, got, want)
	}
}

// confEqualWeights: [n, expected].
func confEqualWeights(t *testing.T, c []RawMessage) {
	n := decode[int](t, c[0])
	want := decode[[]float64](t, c[1])
	got := EqualWeights(n)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = near(got[i], want[i], 1e-8)
	}
	if !ok {
		t.Errorf("EqualWeights(%d) = %v, want %v", n, got, want)
	}
}

// confEvalCondition: [name, condition, attributes, expected, savedGroups?].
func confEvalCondition(t *testing.T, c []RawMessage) {
	attrs := decode[map[string]any](t, c[2])
	want := decode[bool](t, c[3])
	var rawGroups map[string]RawMessage
	if len(c) > 4 {
		rawGroups = decode[map[string]RawMessage](t, c[4])
	}
	groups, _ := compileGroups(rawGroups)
	cond, errs := compileCondition("condition", RawMessage(c[1]), groups, newSlots())
	for _, err := range errs {
		t.Logf("Compile would reject: %v", err)
	}
	got := cond == nil || cond.root.eval(attrs, nil)
	if got != want {
		t.Errorf("evalCondition(%s, %s) = %v, want %v", c[1], c[2], got, want)
	}
	if len(errs) == 0 {
		// The public, strict path agrees.
		strict, err := CompileCondition(RawMessage(c[1]), rawGroups)
		if err != nil {
			t.Fatalf("CompileCondition: %v", err)
		}
		if strict != nil && strict.Match(attrs) != want {
			t.Errorf("CompileCondition(%s).Match(%s) = %v, want %v", c[1], c[2], !want, want)
		}
	}
}

// sdkOnly names the SDK-only feature a run case needs, or "".
func sdkOnly(ctx, exp map[string]RawMessage) string {
	switch {
	case ctx["url"] != nil:
		return "URL query-string override (SDK-only: the filter has no browser URL)"
	case ctx["forcedVariations"] != nil:
		return "context forcedVariations (SDK-only: QA overrides per client)"
	case ctx["qaMode"] != nil && string(ctx["qaMode"]) == "true":
		return "qaMode (SDK-only)"
	case ctx["enabled"] != nil && string(ctx["enabled"]) == "false":
		return "context enabled=false (SDK-only global kill switch; Allot disables per experiment with status)"
	case ctx["features"] != nil || exp["parentConditions"] != nil:
		return "prerequisite feature flags (SDK-only: Allot has no feature flags)"
	case exp["urlPatterns"] != nil:
		return "URL targeting (SDK-only)"
	}
	return ""
}

// confRun: [name, context, experiment, value, inExperiment, hashUsed].
func confRun(t *testing.T, c []RawMessage) {
	ctx := decode[map[string]RawMessage](t, c[1])
	exp := decode[map[string]RawMessage](t, c[2])
	if reason := sdkOnly(ctx, exp); reason != "" {
		t.Skip("needs " + reason)
	}
	for k := range ctx {
		// Documents without a sticky-bucket service (which JSON cannot
		// carry) are ignored by the reference: so they are here.
		if k != "attributes" && k != "savedGroups" && k != "qaMode" && k != "stickyBucketAssignmentDocs" {
			t.Fatalf("unhandled context key %q", k)
		}
	}
	attrs := map[string]any{}
	if raw := ctx["attributes"]; raw != nil {
		attrs = decode[map[string]any](t, raw)
	}
	var rawGroups map[string]RawMessage
	if raw := ctx["savedGroups"]; raw != nil {
		rawGroups = decode[map[string]RawMessage](t, raw)
	}
	e := decode[Experiment](t, c[2])
	wantValue := decode[any](t, c[3])
	wantIn, wantHash := decode[bool](t, c[4]), decode[bool](t, c[5])
	if notSent(exp) {
		// The control plane never sends such an experiment to a proxy
		// (translate.FilterConfig selects running ones), so no unit is in
		// it: the reference must agree.
		if wantIn || wantHash || !reflect.DeepEqual(wantValue, decode[any](t, e.Variations[0])) {
			t.Errorf("the reference assigns %v (in %v, hashUsed %v) in an experiment Allot never sends", wantValue, wantIn, wantHash)
		}
		return
	}

	groups, _ := compileGroups(rawGroups)
	comp, errs := compileExperiment("experiment", &e, groups, newSlots())
	for _, err := range errs {
		t.Logf("Compile would reject: %v", err)
	}
	var r Assignment
	comp.eval(&r, attrs, nil, nil, nil, &unitHash{}, nil)
	var gotValue any
	if r.VariationID < len(e.Variations) {
		gotValue = decode[any](t, e.Variations[r.VariationID])
	}
	if !reflect.DeepEqual(gotValue, wantValue) || r.InExperiment != wantIn || r.HashUsed != wantHash {
		t.Errorf("run = value %v in %v hashUsed %v, want %v %v %v", gotValue, r.InExperiment, r.HashUsed, wantValue, wantIn, wantHash)
	}

	// Through the public API, when Compile accepts the definition.
	set, err := Compile(Config{Experiments: []Experiment{e}, SavedGroups: rawGroups})
	if err != nil {
		return
	}
	a := set.Assign(nil, attrs)
	if len(a) != 1 {
		t.Fatalf("Assign returned %d assignments, want 1", len(a))
	}
	wantRendered, _ := renderVariation(RawMessage(c[3]))
	if a[0].Value != wantRendered || a[0].InExperiment != wantIn || a[0].HashUsed != wantHash {
		t.Errorf("Assign = %+v, want value %q in %v hashUsed %v", a[0], wantRendered, wantIn, wantHash)
	}
	if !slices.Contains(set.Referenced(), a[0].HashAttribute) {
		t.Errorf("Referenced() = %v lacks hash attribute %q", set.Referenced(), a[0].HashAttribute)
	}
}

// notSent reports whether GrowthBook's switches turn the experiment off:
// active false, or status draft or stopped. Allot's equivalent is the
// control plane's status, which decides whether a proxy receives the
// experiment at all; the engine has no such switch.
func notSent(exp map[string]RawMessage) bool {
	if raw := exp["active"]; raw != nil && string(raw) == "false" {
		return true
	}
	switch str(exp["status"]) {
	case "draft", "stopped":
		return true
	}
	return false
}

// feature is a GrowthBook feature definition, as far as stickyBucket cases
// use it: the experiment result, not the feature's value, is compared.
type feature struct {
	Rules []map[string]RawMessage `json:"rules"`
}

// ruleFields are the experiment-rule fields the stickyBucket harness maps,
// and what becomes of them. Any other field fails the case, so that a new
// one in the suite is noticed.
var ruleFields = map[string]string{
	"key": "experiment", "variations": "experiment", "weights": "experiment", "coverage": "experiment",
	"hashAttribute": "experiment", "fallbackAttribute": "experiment", "hashVersion": "experiment",
	"seed": "experiment", "namespace": "experiment", "condition": "experiment", "ranges": "experiment",
	"bucketVersion": "experiment", "minBucketVersion": "experiment", "disableStickyBucketing": "experiment",
	"filters": "checked before the experiment, as evalFeature does, and by it",
	"meta":    "variation keys: must be the indexes, Allot's keys",
	"phase":   "informational", "name": "informational", "id": "informational",
}

// ruleExperiment is the experiment GrowthBook's evalFeature builds from an
// experiment rule of feature id: rule.key, or the feature id.
func ruleExperiment(t *testing.T, id string, rule map[string]RawMessage) Experiment {
	t.Helper()
	if rule["variations"] == nil {
		t.Fatalf("unhandled rule without variations (a force or rollout rule): %v", rule)
	}
	e := map[string]RawMessage{}
	for k, v := range rule {
		what, ok := ruleFields[k]
		if !ok {
			t.Fatalf("unhandled rule field %q", k)
		}
		if what == "experiment" || k == "filters" {
			e[k] = v
		}
	}
	if e["key"] == nil || str(e["key"]) == "" {
		e["key"] = RawMessage(strconv.Quote(id))
	}
	if raw := rule["meta"]; raw != nil {
		for i, m := range decode[[]map[string]any](t, raw) {
			if k, ok := m["key"].(string); ok && k != strconv.Itoa(i) {
				t.Skipf("needs variation meta key %q for variation %d (Allot's variation key is its index)", k, i)
			}
		}
	}
	js, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return decode[Experiment](t, js)
}

// confStickyBucket: [name, context, stored documents, feature id,
// experiment result or null, documents after].
func confStickyBucket(t *testing.T, c []RawMessage) {
	ctx := decode[map[string]RawMessage](t, c[1])
	for k := range ctx {
		// The context's own documents are replaced by the service's, as
		// GrowthBook's refreshStickyBuckets does.
		if k != "attributes" && k != "features" && k != "stickyBucketAssignmentDocs" {
			t.Fatalf("unhandled context key %q", k)
		}
	}
	attrs := decode[map[string]any](t, ctx["attributes"])
	features := decode[map[string]feature](t, ctx["features"])
	stored := decode[[]StickyDoc](t, c[2])
	id := decode[string](t, c[3])
	want := decode[map[string]any](t, c[4])
	wantDocs := decode[StickyDocs](t, c[5])

	// The documents a GrowthBook client loads: those of its identifier
	// attributes (every experiment rule's hash attribute, "id" by default,
	// and fallback attribute) for the unit's values.
	ids := map[string]bool{}
	for _, f := range features {
		for _, rule := range f.Rules {
			if rule["variations"] != nil {
				ha := str(rule["hashAttribute"])
				if rule["hashAttribute"] == nil || ha == "" {
					ha = "id"
				}
				ids[ha] = true
				if fa := rule["fallbackAttribute"]; fa != nil && str(fa) != "" {
					ids[str(fa)] = true
				}
			}
		}
	}
	docs := StickyDocs{}
	for _, d := range stored {
		if ids[d.AttributeName] && d.AttributeValue == hashValue(attrs[d.AttributeName]) {
			docs[StickyDocKey(d.AttributeName, d.AttributeValue)] = d
		}
	}

	// evalFeature: the first rule whose experiment the unit is in decides;
	// each experiment stores its assignment before the next runs.
	f, ok := features[id]
	if !ok {
		t.Fatalf("feature %q not in the context", id)
	}
	var got *Assignment
	var seed string
	var hashVersion int
	for _, rule := range f.Rules {
		e := ruleExperiment(t, id, rule)
		set, err := Compile(Config{Experiments: []Experiment{e}})
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		if set.exps[0].filteredOut(attrs, nil, nil, &unitHash{}) {
			continue // evalFeature skips the rule before running its experiment
		}
		a, changes := set.AssignSticky(nil, attrs, docs, nil)
		checkStickyStrings(t, set, attrs, docs, a, changes)
		for _, ch := range changes {
			if v, ok := docs[StickyDocKey(ch.Attribute, ch.Value)].Assignments[ch.Key]; ok && v == ch.Variation {
				t.Errorf("change %+v reported, but the document holds it already", ch)
			}
		}
		docs = docs.Apply(changes)
		if a[0].InExperiment {
			got, seed, hashVersion = &a[0], e.Seed, max(e.HashVersion, 1)
			if seed == "" {
				seed = e.Key
			}
			break
		}
	}

	switch {
	case want == nil && got != nil:
		t.Errorf("in experiment %+v, want no experiment result", *got)
	case want != nil && got == nil:
		t.Errorf("no experiment result, want %v", want)
	case want != nil:
		wantValue, _ := renderVariation(decode[map[string]RawMessage](t, c[4])["value"])
		check := func(field string, got, want any) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s = %v, want %v", field, got, want)
			}
		}
		check("value", got.Value, wantValue)
		check("variationId", float64(got.VariationID), want["variationId"])
		check("key", strconv.Itoa(got.VariationID), want["key"])
		check("inExperiment", got.InExperiment, want["inExperiment"])
		check("hashUsed", got.HashUsed, want["hashUsed"])
		check("stickyBucketUsed", got.StickyBucketUsed, want["stickyBucketUsed"])
		check("hashAttribute", got.HashAttribute, want["hashAttribute"])
		check("hashValue", got.HashValue, hashValue(want["hashValue"]))
		if b, ok := want["bucket"].(float64); ok {
			n, _ := Hash(seed, got.HashValue, hashVersion)
			if !near(n, b, 1e-9) {
				t.Errorf("bucket = %v, want %v", n, b)
			}
		}
	}
	if !reflect.DeepEqual(docs, wantDocs) {
		t.Errorf("documents after:\n got %v\nwant %v", docs, wantDocs)
	}
}

// checkStickyStrings checks that AssignStringsSticky agrees with
// AssignSticky's assignments a and changes when every attribute is a
// string.
func checkStickyStrings(t *testing.T, set *Set, attrs map[string]any, docs StickyDocs, a []Assignment, changes []StickyChange) {
	t.Helper()
	vals := make([]string, 0, len(set.Referenced()))
	for _, name := range set.Referenced() {
		v, ok := attrs[name].(string)
		if !ok && attrs[name] != nil {
			return
		}
		vals = append(vals, v)
	}
	got, gotChanges := set.AssignStringsSticky(nil, vals, set.Outcomes(nil, attrs), docs, nil)
	for i := range a {
		if got[i] != variationOf(a[i]) {
			t.Errorf("AssignStringsSticky = %v, AssignSticky %+v", got, a[i])
		}
	}
	if !slices.Equal(gotChanges, changes) {
		t.Errorf("AssignStringsSticky changes %+v, AssignSticky %+v", gotChanges, changes)
	}
}
