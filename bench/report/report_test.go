package report

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

func steady(v float64) []float64 { return slices.Repeat([]float64{v}, 10) }

// lat is a slice latency per round with the given p99s (p50 half of each).
func lat(p99 ...float64) []map[string]float64 {
	var out []map[string]float64
	for _, v := range p99 {
		out = append(out, map[string]float64{"p50": v / 2, "p99": v})
	}
	return out
}

// targetResults is an interleaved run with every variant a target reads.
func targetResults() *Results {
	return &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "C"}, {ID: "D"}, {ID: "E"}, {ID: "G"}, {ID: "H"},
			{ID: "K", FloorOf: "GH"}, {ID: "Q", WasmTwin: "G"}, {ID: "R", WasmTwin: "H"}},
		Paired: &Paired{Rounds: 10, Rate: 2000,
			CPU: map[string][]float64{"A": steady(20), "C": steady(25), "E": steady(30), "G": steady(55), "H": steady(60),
				"K": steady(52), "Q": steady(26), "R": steady(29)},
			RPS: map[string][]float64{"A": steady(40000), "C": steady(32000), "Q": steady(30000),
				"R": {24000, 25000, 26000, 27000, 28000, 24000, 25000, 26000, 27000, 28000}},
			SliceLatency: map[string][]map[string]float64{
				"A": lat(steady(100)...), "G": lat(steady(110)...), "Q": lat(steady(120)...), "D": lat(steady(600)...)},
			Latency: map[string]map[string]float64{"A": {"p99": 100}, "G": {"p99": 110}, "Q": {"p99": 120}, "D": {"p99": 600}},
		},
		Memory: &Memory{BaseRSS: 64 << 20, AllotRSS: 150 << 20, NativeIdle: 70 << 20, NativeRSS: 82 << 20},
	}
}

// TestTargetRows: each target is reported with its figures, its 95%
// interval where it is a ratio, and met, missed or undecided.
func TestTargetRows(t *testing.T) {
	out, err := renderReport(targetResults())
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"| Allot native, 50 experiments, warm cache (Q): max throughput ≥ 0.70 × no filter (A) | median over the interleaved rounds of each round's ratio: Q 30000 req/s, A 40000 req/s (medians): 0.75 × A, 95% interval 0.75–0.75 × (limit 0.70 ×) | **met** |",
		"| … and ≥ the Lua filter's (C) | median over the interleaved rounds of each round's ratio: Q 30000 req/s, C 32000 req/s (medians): 0.94 × C, 95% interval 0.94–0.94 × (limit 1.00 ×) | **missed** |",
		"| Allot native, 50 experiments, cold cache (R): max throughput ≥ 0.65 × no filter (A) | median over the interleaved rounds of each round's ratio: R 26000 req/s, A 40000 req/s (medians): 0.65 × A, 95% interval ",
		"(limit 0.65 ×) | **met** (undecided: the 95% interval includes the limit) |",
		"| RSS with Allot native (liballot.so, warm path on), 1,000 experiments, full cache ≤ A + 24 MiB (`--concurrency 2`) | A 64.0 MiB, with it 82.0 MiB: +18.0 MiB (limit 88.0 MiB) | **met** |",
		"| Allot native's (Q) added p99 at the fixed rate ≤ 1/20 of the ext_authz call's (D) | median over the interleaved rounds of each round's difference to A: Q adds 20 µs, D adds 500 µs (limit 25 µs): 0.040 × D's, 95% interval 0.04–0.04 ×",
		"| Wasm, warm cache: G − K ≤ 0.25 × E's CPU per request | G − K per round, median: +3.0 µs; E adds 10.0 µs: 0.30 × E, 95% interval 0.30–0.30 × (limit 0.25 × E, 2.5 µs) | **missed** |",
		"| Wasm, cold cache: H − K ≤ 0.6 × E's CPU per request | H − K per round, median: +8.0 µs; E adds 10.0 µs: 0.80 × E, 95% interval 0.80–0.80 × (limit 0.60 × E, 6.0 µs) | **missed** |",
		"| Allot Wasm's (G) added p99 at the fixed rate ≤ 1/5 of D's | median over the interleaved rounds of each round's difference to A: G adds 10 µs, D adds 500 µs (limit 100 µs): 0.020 × D's, 95% interval 0.02–0.02 ×",
		"| RSS with Allot (Wasm), 1,000 experiments, full cache ≤ A + 96 MiB (`--concurrency 2`) | A 64.0 MiB, with it 150.0 MiB: +86.0 MiB (limit 160.0 MiB) | **met** |",
		// The native module against the Wasm module.
		"| G | +35.0 | Q | +6.0 | -29.0 (-29.0 … -29.0) | 0.75 (0.75–0.75 ×) |",
	)
	for _, gone := range []string{"1.25 × E", "1.6 × E"} {
		if strings.Contains(out, gone) {
			t.Errorf("the report still has the old target %q", gone)
		}
	}

	// With N measured, each throughput row shows it; a missed limit N's
	// whole interval misses too lies below the floor of any Go filter.
	res := targetResults()
	res.Variants = append(res.Variants, variant.Info{ID: "N", Probe: true})
	res.Paired.RPS["N"] = steady(27000)
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report with N", out,
		"(limit 0.70 ×). The floor of a Go filter on this host, N (the minimal Go dynamic module: one header, none of Allot's work): 0.68 × A, 95% interval 0.68–0.68 × | **met** |",
		"(limit 1.00 ×). The floor of a Go filter on this host, N (the minimal Go dynamic module: one header, none of Allot's work): 0.84 × C, 95% interval 0.84–0.84 ×: the target lies below that floor | **missed** (below its floor) |")
	res.Paired.RPS["N"] = steady(30000)
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report with N", out, "N (the minimal Go dynamic module: one header, none of Allot's work): 0.75 × A, 95% interval 0.75–0.75 × | **met** |")

	// Without the extras, the memory targets say so.
	res = targetResults()
	res.Memory = nil
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report without extras", out,
		"| RSS with Allot native (liballot.so, warm path on), 1,000 experiments, full cache ≤ A + 24 MiB (`--concurrency 2`) | not measured: run without -skip-extras | **not measured** |")
}

// warmResults is an interleaved run with the variants of #37's targets and
// tables: the warm path on (Q–T) and off (q–t), B widened (b), Lua (C)
// and the proxied pair (a, p).
func warmResults() *Results {
	var vs []variant.Info
	for _, id := range []string{"A", "C", "Q", "R", "S", "T", "q", "r", "s", "t", "b", "a", "p"} {
		vs = append(vs, variant.Info{ID: id, Cost: strings.ContainsAny(id, "qrstap"), Probe: id == "b"})
	}
	return &Results{Variants: vs, Paired: &Paired{Rounds: 10,
		CPU: map[string][]float64{"A": steady(20), "C": steady(30), "Q": steady(29), "R": steady(32), "S": steady(24), "T": steady(31),
			"q": steady(33), "r": steady(32), "s": steady(28), "t": steady(31), "b": steady(26), "a": steady(40), "p": steady(48)},
		RPS: map[string][]float64{"A": steady(60000), "C": steady(50000), "S": steady(52000), "Q": steady(45000),
			"R": {40000, 40100, 39900, 40000, 40200, 39800, 40000, 40100, 39900, 40000}, "r": steady(40000),
			"a": steady(20000), "p": steady(19000)},
		UpstreamCPU: map[string][]float64{"a": steady(30), "p": steady(32)},
		Counters:    map[string]map[string]int64{"Q": {"cache_hits": 99, "cache_misses": 1}, "q": {"cache_hits": 99, "cache_misses": 1}},
	}}
}

// TestWarmPathTargets: #37's targets — S's throughput against Lua's, Q's
// addition against the header_mutation writing its headers (b), R with
// the warm path on no worse than off — each with its figures and verdict.
func TestWarmPathTargets(t *testing.T) {
	out, err := renderReport(warmResults())
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"| Allot native, 50 experiments, warm cache, lean (S): max throughput ≥ the Lua filter's (C), one header from a hand-written script | median over the interleaved rounds of each round's ratio: S 52000 req/s, C 50000 req/s (medians): 1.04 × C, 95% interval 1.04–1.04 × (limit 1.00 ×) | **met** |",
		"| Allot native, 50 experiments, warm cache, every header (Q): CPU added per request ≤ 1.5 × that of header_mutation adding the same headers (b) | medians of the per-round differences to A: Q adds +9.0 µs, b adds +6.0 µs: 1.50 × b's addition, 95% interval 1.50–1.50 × (limit 1.50 ×, 9.0 µs) | **met** |",
		"| Allot native, cold cache (R, warm path on): no worse than with the warm path off (r), within noise | median over the interleaved rounds of each round's ratio: R 40000 req/s, r 40000 req/s (medians): 1.000 × r, 95% interval ",
		"met unless the whole interval lies below 1 (the run shows R slower). CPU per request R − r per round: +0.0 µs (95% interval +0.0 … +0.0) | **met** |",
	)
	// Q over the limit, R measurably slower: missed.
	res := warmResults()
	res.Paired.CPU["Q"] = steady(30)
	res.Paired.RPS["R"] = steady(39000)
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"| medians of the per-round differences to A: Q adds +10.0 µs, b adds +6.0 µs: 1.67 × b's addition, 95% interval 1.67–1.67 × (limit 1.50 ×, 9.0 µs) | **missed** |",
		"R 39000 req/s, r 40000 req/s (medians): 0.975 × r, 95% interval 0.97–0.97 ×; met unless the whole interval lies below 1 (the run shows R slower). CPU per request R − r per round: +0.0 µs (95% interval +0.0 … +0.0) | **missed** |",
	)
	if strings.Contains(out, "through the ABI") {
		t.Errorf("the writes row names the ABI's floor without o measured")
	}
}

// TestWritesTargetABIFloor: with o measured, the writes row shows the floor
// of Q's writes through the dynamic-modules ABI as a ratio to b's
// addition, and a missed target whose limit o's whole interval exceeds too
// is marked below its floor.
func TestWritesTargetABIFloor(t *testing.T) {
	const what = "| Allot native, 50 experiments, warm cache, every header (Q): CPU added per request ≤ 1.5 × that of header_mutation adding the same headers (b) | "
	const abi = ". The floor of Q's writes through the ABI, o (the C dynamic module: O's read and hash, then Q's writes with the callbacks its C warm path makes them with, none of its work): "
	cases := []struct {
		name     string
		q, o     []float64
		row, not string
	}{
		{"missed, o above the limit: below its floor", steady(30), steady(30),
			"Q adds +10.0 µs, b adds +6.0 µs: 1.67 × b's addition, 95% interval 1.67–1.67 × (limit 1.50 ×, 9.0 µs)" + abi +
				"+10.0 µs = 1.67 × b's addition, 95% interval 1.67–1.67 ×: the target lies below that floor | **missed** (below its floor) |", ""},
		{"missed, o within the limit", steady(30), steady(28),
			"Q adds +10.0 µs, b adds +6.0 µs: 1.67 × b's addition, 95% interval 1.67–1.67 × (limit 1.50 ×, 9.0 µs)" + abi +
				"+8.0 µs = 1.33 × b's addition, 95% interval 1.33–1.33 × | **missed** |", "below its floor"},
		{"met, o above the limit", steady(28), steady(30),
			"Q adds +8.0 µs, b adds +6.0 µs: 1.33 × b's addition, 95% interval 1.33–1.33 × (limit 1.50 ×, 9.0 µs)" + abi +
				"+10.0 µs = 1.67 × b's addition, 95% interval 1.67–1.67 × | **met** |", "below its floor"},
		{"missed, o's interval includes the limit", steady(30), []float64{26, 26, 26, 26, 26, 35, 35, 35, 35, 35},
			"Q adds +10.0 µs, b adds +6.0 µs: 1.67 × b's addition, 95% interval 1.67–1.67 × (limit 1.50 ×, 9.0 µs)" + abi +
				"+10.5 µs = 1.75 × b's addition, 95% interval ", "below its floor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := warmResults()
			res.Variants = append(res.Variants, variant.Info{ID: "o", Probe: true})
			res.Paired.CPU["Q"], res.Paired.CPU["o"] = c.q, c.o
			out, err := renderReport(res)
			if err != nil {
				t.Fatal(err)
			}
			contains(t, "report", out, what+"medians of the per-round differences to A: "+c.row)
			if c.not != "" && strings.Contains(out, c.not) {
				t.Errorf("the report says %q", c.not)
			}
		})
	}
}

// TestWarmPathSections: the warm path's table sets each of Q–T against
// its letter with the path off, and the proxied pair's gives Allot's
// addition and share of a proxied request.
func TestWarmPathSections(t *testing.T) {
	out, err := renderReport(warmResults())
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"### The native module's warm path: on against off",
		"| native | every header, warm cache (Q against q) | Q | q | +13.0 | +9.0 | -4.0 (-4.0 … -4.0) | 0.69 (0.69–0.69 ×) | – | 99.0% hits |",
		"| native | lean, warm cache (S against s) | S | s | +8.0 | +4.0 | -4.0 (-4.0 … -4.0) | 0.50 (0.50–0.50 ×) | – | – |",
		"### A request to an upstream: Allot's share",
		"| Envoy CPU µs/req (median) | 40.0 | 48.0 |",
		"| max req/s (median) | 20000 | 19000 |",
		"| upstream CPU µs/req (median) | 30.0 | 32.0 |",
		"Allot adds +8.0 µs of Envoy CPU per proxied request (p − a per round; 95% interval +8.0 … +8.0), against +9.0 µs for Q over A on a `direct_response` in the same rounds: 17% of the proxy's CPU for that request, 10% of the proxy's and this minimal upstream's together",
		"p's maximum throughput is 0.95 × a's (median of the per-round ratios; 95% interval 0.95–0.95 ×).",
	)
	// Without the pair or the path off, neither section.
	res := &Results{Variants: []variant.Info{{ID: "A"}, {ID: "Q"}}, Paired: &Paired{Rounds: 3,
		CPU: map[string][]float64{"A": {1, 1, 1}, "Q": {2, 2, 2}}}}
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"warm path: on against off", "A request to an upstream"} {
		if strings.Contains(out, gone) {
			t.Errorf("the report has %q without its variants", gone)
		}
	}
}

// TestFloorsSection: the report splits each Allot variant into its floor
// and Allot's own work, gives G and H their own-work limits, and compares
// a floor with its native counterpart when the run has one.
func TestFloorsSection(t *testing.T) {
	round := func(add float64) []float64 { return []float64{20 + add, 21 + add, 22 + add} }
	res := &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "E"}, {ID: "G"}, {ID: "H"}, {ID: "I"}, {ID: "J"},
			{ID: "K", FloorOf: "GH"}, {ID: "L", FloorOf: "IJ"}},
		Paired: &Paired{Rounds: 3, CPU: map[string][]float64{
			"A": round(0), "E": round(10), "G": round(40), "H": round(50), "I": round(20), "J": round(30),
			"K": round(19), "L": round(11),
		}},
	}
	out, err := RenderFloors(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "floors section", out,
		"| G | K | +19.0 µs (1.90 × E; 1.90–1.90 ×) | – | +40.0 µs (4.00 × E) | +21.0 µs (2.10 × E; +21.0 … +21.0) | ≤ 0.25 × E (2.5 µs) |",
		"| J | L | +11.0 µs (1.10 × E; 1.10–1.10 ×) | – | +30.0 µs (3.00 × E) | +19.0 µs (1.90 × E; +19.0 … +19.0) | – |",
	)

	// A native floor is measured against N, and shows its throughput.
	res.Variants = append(res.Variants, variant.Info{ID: "N"}, variant.Info{ID: "Q"}, variant.Info{ID: "U", FloorOf: "Q", FloorRef: "N"})
	res.Paired.CPU["N"], res.Paired.CPU["Q"], res.Paired.CPU["U"] = round(5), round(20), round(15)
	res.Paired.RPS = map[string][]float64{"A": {100, 100, 100}, "U": {60, 60, 60}}
	out, err = RenderFloors(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "floors section", out,
		"| Q | U | +15.0 µs (3.00 × N; 3.00–3.00 ×) | 0.60 (0.60–0.60 ×) | +20.0 µs (4.00 × N) | +5.0 µs (1.00 × N; +5.0 … +5.0) | – |")
	res.Variants = res.Variants[:len(res.Variants)-3]
	res.Paired.RPS = nil
	if strings.Contains(out, "Native counterpart") {
		t.Errorf("a native counterpart paragraph without M:\n%s", out)
	}

	// The native counterpart: decided when every round's writes cost more
	// from Wasm (K − E) than natively (M), undecided otherwise.
	res.Variants = append(res.Variants, variant.Info{ID: "M", NativeOf: "K"})
	res.Paired.CPU = map[string][]float64{"A": steady(20), "E": steady(30), "G": steady(60), "H": steady(70),
		"K": steady(50), "M": {22, 23, 22, 23, 22, 23, 22, 23, 22, 23}}
	out, err = RenderFloors(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "floors section", out,
		"M makes K's writes with Envoy's own filters instead of from a Wasm VM",
		"it adds +2.5 µs over A (0.25 × E; 95% interval +2.0 … +3.0 µs)",
		"the same writes cost +20.0 µs beyond E's one header (K − E per round; 95% interval +20.0 … +20.0 µs)",
		"Making them from Wasm costs +17.5 µs more than Envoy charges for the writes themselves (95% interval +17.0 … +18.0 µs)",
	)
	res.Paired.CPU["M"] = []float64{35, 55, 35, 55, 35, 55, 35, 55, 35, 55}
	out, err = RenderFloors(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "floors section", out, "This run does not resolve a difference between the two")
	if strings.Contains(out, "Making them from Wasm costs") {
		t.Errorf("an unresolved difference is called:\n%s", out)
	}

	// No interleaved measurement, no section.
	res.Paired = nil
	if out, err := renderReport(res); err != nil || strings.Contains(out, "### Floors") {
		t.Errorf("floors without an interleaved measurement (%v):\n%s", err, out)
	}
}

// TestNativeFloor: the report says what Go adds over C on the native host
// (N − O per round).
func TestNativeFloor(t *testing.T) {
	res := &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "E"}, {ID: "N", Probe: true, WasmTwin: "E"}, {ID: "O", Probe: true}},
		Paired: &Paired{Rounds: 10, CPU: map[string][]float64{"A": steady(20), "E": steady(34), "N": steady(24), "O": steady(21)},
			RPS: map[string][]float64{"A": steady(40000), "N": steady(36000), "O": steady(38000)}},
	}
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"| E | +14.0 | N | +4.0 | -10.0 (-10.0 … -10.0) | 0.90 (0.90–0.90 ×) |",
		"the C module O adds +1.0 µs over A, the Go module N +4.0 µs",
		"(N − O per round) is +3.0 µs (95% interval +3.0 … +3.0)",
	)
}

// TestRatioCI: the interval of a ratio of two variants' additions holds
// the ratio of their medians, is a point when the rounds agree, widens
// with their spread, is unbounded when E's addition may be nothing, and is
// the same every time it is computed from the same rounds.
func TestRatioCI(t *testing.T) {
	pr := &Paired{CPU: map[string][]float64{
		"A": {20, 20, 20, 20, 20, 20, 20, 20, 20, 20},
		"E": {30, 30, 30, 30, 30, 30, 30, 30, 30, 30},
		"G": {40, 40, 40, 40, 40, 40, 40, 40, 40, 40},
		"H": {40, 45, 38, 52, 41, 60, 44, 39, 47, 43},
		"Z": {19, 21, 20, 22, 18, 20, 21, 19, 20, 30},
	}}
	if lo, hi, ok := pr.ratioCI("G", "E"); !ok || lo != 2 || hi != 2 {
		t.Errorf("steady rounds: interval %v–%v (%v), want 2–2", lo, hi, ok)
	}
	h, _ := pr.Add("H")
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
	if _, _, ok := (*Paired)(nil).ratioCI("G", "E"); ok {
		t.Error("interval without an interleaved measurement")
	}
}

// TestRatioVerdict: a target is met or missed by its median ratio, and
// marked undecided exactly when the interval includes the limit, for
// at-most and at-least targets alike.
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
	for _, c := range []struct {
		pt, lo, hi float64
		want       string
	}{
		{0.8, 0.75, 0.9, "**met**"},
		{0.8, 0.6, 0.9, "**met** (undecided: the 95% interval includes the limit)"},
		{0.6, 0.5, 0.65, "**missed**"},
		{0.6, 0.5, 0.7, "**missed** (undecided: the 95% interval includes the limit)"},
		{0.7, 0.7, 0.7, "**met**"},
	} {
		if got := atLeastVerdict(c.pt, c.lo, c.hi, 0.7); got != c.want {
			t.Errorf("atLeastVerdict(%v, %v, %v, 0.7) = %q, want %q", c.pt, c.lo, c.hi, got, c.want)
		}
	}
}

// contains fails t for each of wants that out (the rendered what) lacks,
// line breaks and indentation read as one space (a report's prose is
// wrapped).
func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, want := range wants {
		if !strings.Contains(flat(out), flat(want)) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

// TestStickyRows: each stickiness row sets its variant against its
// baseline of the same rounds — the difference with its interval, the
// ratio of the additions, the throughput, Allot's counters as shares —
// the native sticky-off row states Q alone, and a row whose variants the
// run did not measure is left out.
func TestStickyRows(t *testing.T) {
	counters := func(hits, misses, written int64) map[string]int64 {
		return map[string]int64{"cache_hits": hits, "cache_misses": misses, "sticky_cookie_written": written}
	}
	res := &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "G"}, {ID: "H"}, {ID: "Q", WasmTwin: "G"}, {ID: "R", WasmTwin: "H"},
			{ID: "V", Cost: true}, {ID: "W", Cost: true}, {ID: "X", Cost: true}, {ID: "Y", Cost: true}, {ID: "v", Cost: true, WasmTwin: "V"}},
		Paired: &Paired{Rounds: 10, CPU: map[string][]float64{"A": steady(20), "G": steady(40), "H": steady(50), "Q": steady(30),
			"R": steady(34), "V": steady(44), "W": steady(60), "X": steady(65), "Y": steady(39), "v": steady(33)},
			RPS: map[string][]float64{"A": steady(40000), "G": steady(20000), "H": steady(16000), "Q": steady(30000),
				"V": steady(18000), "W": steady(12000), "X": steady(12000), "Y": steady(20000), "v": steady(27000)},
			Counters: map[string]map[string]int64{"V": counters(999, 1, 0), "X": counters(0, 500, 500)}},
	}
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"### Stickiness: what sticky bucketing costs",
		"(G, the default build, against Y, the same module built without the export) | G | Y | +19.0 | +20.0 | +1.0 (+1.0 … +1.0) | 1.05 (1.05–1.05 ×) | 1.00 (1.00–1.00 ×) | – |",
		"(V against G) | V | G | +20.0 | +24.0 | +4.0 (+4.0 … +4.0) | 1.20 (1.20–1.20 ×) | 0.90 (0.90–0.90 ×) | 99.9% hits, 0.00 cookies set per request |",
		"(W against H) | W | H | +30.0 | +40.0 | +10.0 (+10.0 … +10.0) | 1.33 (1.33–1.33 ×) | 0.75 (0.75–0.75 ×) | – |",
		"(X against H) | X | H | +30.0 | +45.0 | +15.0 (+15.0 … +15.0) | 1.50 (1.50–1.50 ×) | 0.75 (0.75–0.75 ×) | 0.0% hits, 1.00 cookies set per request |",
		"(Q, over A) | Q | – | – | +10.0 | – | – | – | – |",
		"(v against Q) | v | Q | +10.0 | +13.0 | +3.0 (+3.0 … +3.0) | 1.30 (1.30–1.30 ×) | 0.90 (0.90–0.90 ×) | – |",
	)
	for _, gone := range []string{"(w against R)", "(x against R)"} {
		if strings.Contains(out, gone) {
			t.Errorf("a row the run did not measure: %q", gone)
		}
	}
	res.Variants = res.Variants[:5]
	if out, err := renderReport(res); err != nil || strings.Contains(out, "### Stickiness") {
		t.Errorf("a stickiness section without the sticky variants (%v):\n%s", err, out)
	}
}

// TestNativeMemory: the memory section states the native module's RSS with
// its warm path on against the 24 MiB target, the second pass's cache
// hits, and the same module with the path off beside it.
func TestNativeMemory(t *testing.T) {
	res := targetResults()
	m := res.Memory
	m.NativeRSS, m.NativeHits, m.NativePassCPU = 89<<20, 809, 68.4
	m.NativeGoRSS, m.NativeGoHits, m.NativeGoPassCPU = 88<<20, 803, 63.4
	m.CServed, m.CMarked = 998, 1000
	m.MinimalRSS, m.OneRSS = 120<<20, 140<<20
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"| RSS with Allot native (liballot.so, warm path on), 1,000 experiments, full cache ≤ A + 24 MiB (`--concurrency 2`) | A 64.0 MiB, with it 89.0 MiB: +25.0 MiB (limit 88.0 MiB) | **missed** |",
		"and a second pass of 5,600 requests cycling through the fill's last 700 user ids — fewer than a worker's byte bound holds at 1,000 experiments (about 800), so each worker's Go cache keeps them and hands each to its C cache from the unit's second request on that worker (the fill itself, every unit new, leaves the C caches nearly empty: the workers stop looking and Go hands C no new unit) — 89.0 MiB: **+25.0 MiB** over A.",
		"The second pass counted 809 cache hits",
		"then 1,000 marked requests over the same units: **998 of them were served in C**, without entering Go (a marked request that enters Go fails open: 2 did)",
		"Envoy's CPU over the pass: 68.4 µs per request with the path on, 63.4 µs with it off",
		"the same fill and second pass (803 cache hits) leave 88.0 MiB, so the C caches and their tables cost +1.0 MiB.",
		"| Allot native, 1,000 experiments, caches full (warm path on: C's and Go's) | 89.0 | +25.0 |",
		"| Allot native, 1,000 experiments, caches full (warm path off: Go's only) | 88.0 | +24.0 |",
	)
}

// TestReportFits: the report as written has no line over make lint's
// bound outside fenced code, and a target reads as a list item.
func TestReportFits(t *testing.T) {
	out, err := RenderReport(targetResults())
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for i, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		} else if !fenced && len(l) > maxLine {
			t.Errorf("line %d is %d characters, at most %d: %.80q…", i+1, len(l), maxLine, l)
		}
	}
	contains(t, "report", out,
		"- Allot native, 50 experiments, warm cache (Q): max throughput ≥ 0.70 × no filter (A) — numbers: median over the interleaved rounds")
}
