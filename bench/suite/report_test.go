package suite

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestFloorsSection: the report splits each target's variant into its
// floor and Allot's own work, and says whether the target lies below the
// floor (out of reach for any filter making those writes) or how much room
// it leaves.
func TestFloorsSection(t *testing.T) {
	round := func(add float64) []float64 { return []float64{20 + add, 21 + add, 22 + add} }
	res := &results{
		Variants: []variantInfo{{ID: "A"}, {ID: "E"}, {ID: "G"}, {ID: "H"}, {ID: "I"}, {ID: "J"},
			{ID: "K", FloorOf: "GH"}, {ID: "L", FloorOf: "IJ"}},
		Paired: &paired{CPU: map[string][]float64{
			"A": round(0), "E": round(10), "G": round(40), "H": round(50), "I": round(20), "J": round(30),
			"K": round(19), "L": round(11),
		}},
	}
	var b strings.Builder
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	out := b.String()
	contains(t, "floors section", out,
		"| G | K | +19.0 µs (1.90 × E; 1.90–1.90 ×) | +40.0 µs (4.00 × E) | +21.0 µs | 1.25 × E (12.5 µs) |",
		"| J | L | +11.0 µs (1.10 × E; 1.10–1.10 ×) | +30.0 µs (3.00 × E) | +19.0 µs | 1.60 × E (16.0 µs) |",
		"G's floor alone adds 1.90 × E (95% interval 1.90–1.90 ×), above G's limit of 1.25 × E: no Go filter",
		"H's floor alone adds 1.90 × E (95% interval 1.90–1.90 ×), above H's limit of 1.60 × E",
		"I's floor adds 1.10 × E, within its limit of 1.25 × E: the target leaves Allot 1.5 µs for its own work, which takes 9.0 µs",
	)
	// A floor above the limit whose interval still reaches below it is
	// not called out of reach.
	steady := func(v float64) []float64 { return slices.Repeat([]float64{v}, 10) }
	res.Paired.CPU = map[string][]float64{"A": steady(20), "E": steady(30), "G": steady(60), "H": steady(70),
		"K": {30, 31, 32, 33, 34, 50, 51, 52, 53, 54}}
	b.Reset()
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	out = b.String()
	contains(t, "floors section", out,
		"G's floor alone adds 2.20 × E, above G's limit of 1.25 × E, though this run's 95% interval (",
		"×) includes the limit: it cannot rule out a floor within it",
	)
	if strings.Contains(out, "no Go filter") {
		t.Errorf("a floor whose interval includes the limit is called out of reach:\n%s", out)
	}

	// The native counterpart: decided when every round's writes cost more
	// from Wasm (K − E) than natively (M), undecided otherwise.
	res.Variants = append(res.Variants, variantInfo{ID: "M", NativeOf: "K"})
	res.Paired.CPU = map[string][]float64{"A": steady(20), "E": steady(30), "G": steady(60), "H": steady(70),
		"K": steady(50), "M": {22, 23, 22, 23, 22, 23, 22, 23, 22, 23}}
	b.Reset()
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	contains(t, "floors section", b.String(),
		"M makes K's writes with Envoy's own filters instead of from a Wasm VM",
		"it adds +2.5 µs over A (0.25 × E; 95% interval +2.0 … +3.0 µs)",
		"the same writes cost +20.0 µs beyond E's one header (K − E per round; 95% interval +20.0 … +20.0 µs)",
		"Making them from Wasm costs +17.5 µs more than Envoy charges for the writes themselves (95% interval +17.0 … +18.0 µs)",
	)
	res.Paired.CPU["M"] = []float64{35, 55, 35, 55, 35, 55, 35, 55, 35, 55}
	b.Reset()
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	contains(t, "floors section", b.String(), "This run does not resolve a difference between the two")
	if strings.Contains(b.String(), "Making them from Wasm costs") {
		t.Errorf("an unresolved difference is called:\n%s", b.String())
	}

	// No paired measurement, no section.
	b.Reset()
	res.Paired = nil
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	if b.Len() != 0 {
		t.Errorf("floors without an interleaved measurement wrote %q", b.String())
	}
}

// TestRatioCI: the interval of a ratio of two variants' additions holds
// the ratio of their medians, is a point when the rounds agree, widens
// with their spread, is unbounded when E's addition may be nothing, and is
// the same every time it is computed from the same rounds.
func TestRatioCI(t *testing.T) {
	pr := &paired{CPU: map[string][]float64{
		"A": {20, 20, 20, 20, 20, 20, 20, 20, 20, 20},
		"E": {30, 30, 30, 30, 30, 30, 30, 30, 30, 30},
		"G": {40, 40, 40, 40, 40, 40, 40, 40, 40, 40},
		"H": {40, 45, 38, 52, 41, 60, 44, 39, 47, 43},
		"Z": {19, 21, 20, 22, 18, 20, 21, 19, 20, 30},
	}}
	if lo, hi, ok := pr.ratioCI("G", "E"); !ok || lo != 2 || hi != 2 {
		t.Errorf("steady rounds: interval %v–%v (%v), want 2–2", lo, hi, ok)
	}
	h, _ := pr.add("H")
	lo, hi, ok := pr.ratioCI("H", "E")
	if !ok || !(lo < h/10 && h/10 < hi) || lo < 1.8 || hi > 3.2 {
		t.Errorf("spread rounds: interval %v–%v around %v", lo, hi, h/10)
	}
	if lo2, hi2, _ := pr.ratioCI("H", "E"); lo2 != lo || hi2 != hi {
		t.Errorf("interval not reproducible: %v–%v, then %v–%v", lo, hi, lo2, hi2)
	}
	if _, hi, _ := pr.ratioCI("H", "Z"); !math.IsInf(hi, 1) || !strings.Contains(ratioRange(1, hi), "unbounded") {
		t.Errorf("over an addition of about nothing: upper bound %v, want unbounded", hi)
	}
	if _, _, ok := pr.ratioCI("Q", "E"); ok {
		t.Error("interval of an unmeasured variant")
	}
	if _, _, ok := (*paired)(nil).ratioCI("G", "E"); ok {
		t.Error("interval without an interleaved measurement")
	}
}

// TestRatioVerdict: a target is met or missed by its median ratio, and
// marked undecided exactly when the interval includes the limit.
func TestRatioVerdict(t *testing.T) {
	for _, c := range []struct {
		pt, lo, hi float64
		want       string
	}{
		{1.1, 0.9, 1.2, "**met**"},
		{1.1, 0.9, 1.3, "**met** (undecided: the 95% interval includes the limit)"},
		{2, 1.3, 3, "**missed**"},
		{2, 1.25, 3, "**missed** (undecided: the 95% interval includes the limit)"},
		{1.25, 1.25, 1.25, "**met**"},
	} {
		if got := ratioVerdict(c.pt, c.lo, c.hi, 1.25); got != c.want {
			t.Errorf("ratioVerdict(%v, %v, %v, 1.25) = %q, want %q", c.pt, c.lo, c.hi, got, c.want)
		}
	}
}

// TestTargetRows: the Targets section gives each ratio target its 95%
// interval and marks undecided the one whose interval includes its limit.
func TestTargetRows(t *testing.T) {
	steady := func(v float64) []float64 { return slices.Repeat([]float64{v}, 10) }
	lat := func(p99 ...float64) []map[string]float64 {
		var out []map[string]float64
		for _, v := range p99 {
			out = append(out, map[string]float64{"p50": v / 2, "p99": v})
		}
		return out
	}
	res := &results{
		Variants: []variantInfo{{ID: "A"}, {ID: "D"}, {ID: "E"}, {ID: "G"}, {ID: "I"}},
		Paired: &paired{Rounds: 10, Rate: 2000,
			CPU: map[string][]float64{"A": steady(20), "E": steady(30), "G": steady(60),
				"I": {30, 31, 32, 33, 34, 30, 31, 32, 33, 44}},
			SliceLatency: map[string][]map[string]float64{
				"A": lat(steady(100)...), "G": lat(steady(110)...), "D": lat(steady(600)...)},
			Latency: map[string]map[string]float64{"A": {"p99": 100}, "G": {"p99": 110}, "D": {"p99": 600}},
		},
	}
	out := renderReport(res)
	contains(t, "report", out,
		"| G adds ≤ 1.25 × E's CPU per request | G adds 40.0 µs, E adds 10.0 µs: 4.00 × E, 95% interval 4.00–4.00 × (limit 12.5 µs) | **missed** |",
		"| … with the lean configuration (I) | I adds 12.0 µs, E adds 10.0 µs: 1.20 × E, 95% interval ",
		"(limit 12.5 µs) | **met** (undecided: the 95% interval includes the limit) |",
		"G adds 10 µs, D adds 500 µs (limit 100 µs): 0.020 × D's, 95% interval 0.02–0.02 ×",
	)
}

// contains fails t for each of wants that out (the rendered what) lacks.
func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}
