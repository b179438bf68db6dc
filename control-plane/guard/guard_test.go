package guard

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// hist is a histogram over wire.LatencyBounds with the given counts
// in the buckets whose upper bound is the key (0: the overflow bucket).
func hist(requests, errors uint64, counts map[float64]uint64) Counts {
	c := Counts{Requests: requests, Errors: errors, Bounds: wire.LatencyBounds}
	if counts == nil {
		return c
	}
	c.Buckets = make([]uint64, len(wire.LatencyBounds)+1)
	for bound, n := range counts {
		i := len(wire.LatencyBounds)
		for j, b := range wire.LatencyBounds {
			if b == bound {
				i = j
			}
		}
		c.Buckets[i] += n
	}
	return c
}

func TestCheck(t *testing.T) {
	errRate := Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}
	p95 := Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}
	fast := hist(10000, 0, map[float64]uint64{25: 5000, 50: 4000, 100: 1000})
	slow := hist(10000, 0, map[float64]uint64{25: 2000, 50: 3000, 100: 2000, 250: 2000, 500: 1000})
	for _, tc := range []struct {
		name       string
		g          Guardrail
		c, t       Counts
		evaluated  bool
		breached   bool
		reason     string // a substring of Reason
		estimate   float64
		checkValue bool
	}{
		{name: "zero counts", g: errRate, reason: "0 requests, want 1000 per variation"},
		{name: "below the minimum sample", g: errRate, c: hist(999, 0, nil), t: hist(5000, 5000, nil), reason: "999 requests, want 1000"},
		{name: "at the minimum sample", g: errRate, c: hist(1000, 0, nil), t: hist(1000, 1000, nil), evaluated: true, breached: true, estimate: 1, checkValue: true},
		{name: "no errors anywhere", g: errRate, c: hist(100000, 0, nil), t: hist(100000, 0, nil), evaluated: true, estimate: 0, checkValue: true},
		{name: "all errors in both", g: errRate, c: hist(5000, 5000, nil), t: hist(5000, 5000, nil), evaluated: true, estimate: 0, checkValue: true},
		{name: "all errors in the control only", g: errRate, c: hist(5000, 5000, nil), t: hist(5000, 0, nil), evaluated: true, estimate: -1, checkValue: true},
		{name: "an increase below maxIncrease", g: errRate, c: hist(1e6, 1e4, nil), t: hist(1e6, 1.5e4, nil), evaluated: true, estimate: 0.005, checkValue: true},
		{name: "an increase above maxIncrease", g: errRate, c: hist(1e5, 1e3, nil), t: hist(1e5, 3e3, nil), evaluated: true, breached: true, estimate: 0.02, checkValue: true},
		{name: "more errors than requests", g: errRate, c: hist(1000, 1001, nil), t: hist(1000, 0, nil), reason: "control: 1001 errors of 1000 requests"},
		{name: "unknown metric", g: Guardrail{Metric: "p99"}, reason: `metric: "p99"`},
		{name: "alpha above 0.5", g: Guardrail{Metric: ErrorRate, Alpha: 0.6}, reason: "alpha: 0.6"},
		{name: "alpha NaN", g: Guardrail{Metric: ErrorRate, Alpha: math.NaN()}, reason: "alpha: NaN"},
		{name: "maxIncrease above 1", g: Guardrail{Metric: ErrorRate, MaxIncrease: 1.5}, reason: "maxIncrease: 1.5"},
		{name: "maxIncrease negative", g: Guardrail{Metric: ErrorRate, MaxIncrease: -0.1}, reason: "maxIncrease: -0.1"},
		{name: "maxRatio below 1", g: Guardrail{Metric: LatencyP95, MaxRatio: 0.9}, reason: "maxRatio: 0.9"},
		{name: "maxRatio infinite", g: Guardrail{Metric: LatencyP95, MaxRatio: math.Inf(1)}, reason: "maxRatio: +Inf"},
		{name: "empty histograms", g: p95, c: hist(5000, 0, nil), t: hist(5000, 0, nil), reason: "control: no timed requests"},
		{name: "all-zero histogram", g: p95, c: fast, t: hist(5000, 0, map[float64]uint64{}), reason: "treatment: no timed requests"},
		{name: "buckets not matching the bounds", g: p95, c: Counts{Buckets: []uint64{1, 2}, Bounds: []float64{1, 2}}, t: fast, reason: "control: 2 latency buckets for 2 bounds, want 3"},
		{name: "bounds not increasing", g: p95, c: Counts{Buckets: []uint64{1, 2, 3}, Bounds: []float64{2, 1}}, t: fast, reason: "control: latency bounds[1]: 1"},
		{name: "other bounds in the treatment", g: p95, c: fast, t: Counts{Buckets: []uint64{1, 2, 3}, Bounds: []float64{1, 2}}, reason: "treatment: latency bounds differ"},
		{name: "p95 above the last bound", g: p95, c: fast, t: hist(5000, 0, map[float64]uint64{0: 5000}), reason: "treatment: p95 above the last latency bound (3.6e+06 ms)"},
		{name: "below the minimum of timed requests", g: p95, c: hist(5000, 0, map[float64]uint64{50: 999}), t: slow, reason: "999 timed requests, want 1000"},
		{name: "too few in the p95's bucket", g: p95, c: hist(5000, 0, map[float64]uint64{25: 940, 50: 15, 100: 45}), t: fast, reason: "15 timed requests in the p95's bucket, want 20"},
		{name: "same latency", g: p95, c: fast, t: fast, evaluated: true, estimate: 1, checkValue: true},
		{name: "all in the first bucket", g: p95, c: hist(5000, 0, map[float64]uint64{0.5: 5000}), t: hist(5000, 0, map[float64]uint64{0.5: 5000}), evaluated: true, estimate: 1, checkValue: true},
		{name: "slower treatment", g: p95, c: fast, t: slow, evaluated: true, breached: true},
		{name: "slower control", g: p95, c: slow, t: fast, evaluated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Check(tc.g, tc.c, tc.t)
			if d.Evaluated != tc.evaluated || d.Breached != tc.breached {
				t.Fatalf("evaluated %v, breached %v (%s), want %v, %v", d.Evaluated, d.Breached, d.Reason, tc.evaluated, tc.breached)
			}
			if !strings.Contains(d.Reason, tc.reason) || d.Reason == "" {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tc.reason)
			}
			for name, v := range map[string]float64{"statistic": d.Statistic, "p-value": d.PValue, "estimate": d.Estimate, "control": d.Control, "treatment": d.Treatment} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s %v, want a finite number", name, v)
				}
			}
			if tc.checkValue && math.Abs(d.Estimate-tc.estimate) > 1e-9 {
				t.Errorf("estimate %v, want %v", d.Estimate, tc.estimate)
			}
			if !d.Evaluated {
				return
			}
			if d.PValue < 0 || d.PValue > 1 || math.Abs(d.PValue-math.Min(1, math.Exp(-d.Statistic))) > 1e-12 {
				t.Errorf("p-value %v with statistic %v, want min(1, exp(−statistic))", d.PValue, d.Statistic)
			}
			if d.Breached != (d.PValue <= DefaultAlpha) {
				t.Errorf("breached %v with p-value %v, alpha %v", d.Breached, d.PValue, DefaultAlpha)
			}
		})
	}
}

// TestAlpha: a smaller alpha needs more evidence; the same counts breach
// at 0.05 and not at 0.001.
func TestAlpha(t *testing.T) {
	c, tr := hist(20000, 200, nil), hist(20000, 500, nil)
	g := Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}
	d := Check(g, c, tr)
	g.Alpha = 0.001
	strict := Check(g, c, tr)
	if !d.Breached || strict.Breached {
		t.Errorf("alpha 0.05: breached %v (p %v); alpha 0.001: breached %v (p %v); want true, false", d.Breached, d.PValue, strict.Breached, strict.PValue)
	}
}

// TestEvidenceGrows: with the same rates, more requests give a smaller
// p-value (once the estimate is above the threshold), and an estimate
// below the threshold never breaches however many requests.
func TestEvidenceGrows(t *testing.T) {
	g := Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}
	prev := 1.0
	for n := uint64(10000); n <= 1e8; n *= 10 {
		d := Check(g, hist(n, n/100, nil), hist(n, n*25/1000, nil))
		if d.PValue > prev || !d.Evaluated {
			t.Errorf("%d requests: p %v after %v, want it no larger", n, d.PValue, prev)
		}
		prev = d.PValue
		if below := Check(g, hist(n, n/100, nil), hist(n, n*19/1000, nil)); below.Breached || below.PValue < 0.5 {
			t.Errorf("%d requests, +0.9 pp: breached %v, p %v; want not breached", n, below.Breached, below.PValue)
		}
	}
	if prev > 1e-6 {
		t.Errorf("1e8 requests, +1.5 pp: p %v, want tiny", prev)
	}
}

// TestQuantileParetoExact: a tail that is a power of the latency (a
// straight line on log-log axes) is read exactly, at the edges ⌊b⌋+1 of
// the bounds (the filter truncates to whole milliseconds).
func TestQuantileParetoExact(t *testing.T) {
	// S(x) = (x/11)^−2 above 11 ms, the edge of the bound 10: every sample
	// above 10 ms; p95 = 11 × √20 ms, in the bucket (25, 50].
	const n = 1e12
	s := func(x float64) float64 { return (11 / x) * (11 / x) }
	c := hist(n, 0, map[float64]uint64{
		25:  uint64(math.Round(n * (1 - s(26)))),
		50:  uint64(math.Round(n * (s(26) - s(51)))),
		100: uint64(math.Round(n * (s(51) - s(101)))),
		0:   uint64(math.Round(n * s(101))),
	})
	e, why := estimateQuantile(c.Bounds, c.Buckets, 0.95)
	want := 11 * math.Sqrt(20)
	if why != "" || math.Abs(e.value-want) > 1e-9*want {
		t.Errorf("p95 %v (%s), want %v", e.value, why, want)
	}
}

// TestQuantileBias: over lognormal latencies (medians 5 to 300 ms, σ of
// the log 0.3 to 1.5), the interpolated p95 reads a change of scale of 1.3
// as a ratio between 1.26 and 1.36, and one of 1.2 as 1.17 to 1.24 — the
// figures docs/guardrails-statistics.md quotes.
func TestQuantileBias(t *testing.T) {
	for _, tc := range []struct{ scale, lo, hi float64 }{{1.3, 1.26, 1.36}, {1.2, 1.17, 1.24}} {
		lo, hi := math.Inf(1), 0.0
		for _, m := range []float64{5, 8, 12, 20, 30, 40, 60, 80, 100, 150, 200, 300} {
			for _, s := range []float64{0.3, 0.5, 0.8, 1, 1.5} {
				r := p95Of(t, lognormal(tc.scale*m, s)) / p95Of(t, lognormal(m, s))
				lo, hi = min(lo, r), max(hi, r)
			}
		}
		t.Logf("a scale of %g reads as %.3f to %.3f", tc.scale, lo, hi)
		if lo < tc.lo || hi > tc.hi {
			t.Errorf("a scale of %g reads as %.3f to %.3f, want within [%g, %g]", tc.scale, lo, hi, tc.lo, tc.hi)
		}
	}
}

// p95Of is the p95 read from a large sample with the exact bucket shares.
func p95Of(t *testing.T, shares []float64) float64 {
	t.Helper()
	b := make([]uint64, len(shares))
	for i, p := range shares {
		b[i] = uint64(math.Round(p * 1e9))
	}
	e, why := estimateQuantile(wire.LatencyBounds, b, 0.95)
	if why != "" {
		t.Fatal(why)
	}
	return e.value
}

func TestCheckAllocations(t *testing.T) {
	c := hist(10000, 100, map[float64]uint64{25: 5000, 50: 4000, 100: 1000})
	for _, g := range []Guardrail{{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}, {Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}} {
		if n := testing.AllocsPerRun(100, func() { Check(g, c, c) }); n > 1 {
			t.Errorf("%s: %v allocations per check, want at most 1 (the reason)", g.Metric, n)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	c := hist(10000, 100, map[float64]uint64{25: 5000, 50: 4000, 100: 1000})
	g := Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}
	b.ReportAllocs()
	for b.Loop() {
		Check(g, c, c)
	}
}

// FuzzCheck: whatever the counts, Check neither panics nor returns a
// p-value outside [0, 1], a NaN, or a breach it did not evaluate.
func FuzzCheck(f *testing.F) {
	f.Add(true, 0.01, uint64(1000), uint64(10), uint64(1000), uint64(30), uint64(500), uint64(400), uint64(100), uint64(3), uint64(7), uint64(9))
	f.Add(false, 1.2, uint64(100), uint64(0), uint64(100), uint64(100), uint64(0), uint64(0), uint64(1), uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, errRate bool, threshold float64, cr, ce, tr, te, b0, b1, b2, b3, b4, b5 uint64) {
		g := Guardrail{Metric: LatencyP95, MaxRatio: threshold, MinRequests: 1}
		if errRate {
			g = Guardrail{Metric: ErrorRate, MaxIncrease: threshold, MinRequests: 1}
		}
		bounds := []float64{1, 5, 25, 100, 500}
		c := Counts{Requests: cr, Errors: ce, Bounds: bounds, Buckets: []uint64{b0, b1, b2, b3, b4, b5}}
		tc := Counts{Requests: tr, Errors: te, Bounds: bounds, Buckets: []uint64{b5, b4, b3, b2, b1, b0}}
		d := Check(g, c, tc)
		if d.Breached && !d.Evaluated || d.Reason == "" {
			t.Fatalf("breached %v, evaluated %v, reason %q", d.Breached, d.Evaluated, d.Reason)
		}
		if d.Evaluated && (math.IsNaN(d.Statistic) || !(d.PValue >= 0 && d.PValue <= 1)) {
			t.Fatalf("statistic %v, p-value %v", d.Statistic, d.PValue)
		}
	})
}

// TestVerdict: the reason reads as fmt's %.3g and %g would write it.
func TestVerdict(t *testing.T) {
	for _, p := range []float64{1, 0.5, 0.012345, 1e-7, 3.14159e-12, 0} {
		for _, alpha := range []float64{0.05, 0.001, 1e-5, 0.5} {
			if got, want := verdict("x", true, p, alpha), fmt.Sprintf("x: p = %.3g ≤ alpha %g", p, alpha); got != want {
				t.Errorf("breached: %q, want %q", got, want)
			}
			if got, want := verdict("x", false, p, alpha), fmt.Sprintf("x not shown: p = %.3g > alpha %g", p, alpha); got != want {
				t.Errorf("not shown: %q, want %q", got, want)
			}
		}
	}
}
