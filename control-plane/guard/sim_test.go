package guard

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// The simulations monitor each experiment as allotd does: every interval
// adds perInterval requests to each variation and the guardrail is checked
// on the cumulative counts; the first breach stops the experiment.
const (
	simRuns        = 1000
	simIntervals   = 100
	simPerInterval = 1000
)

// variation is how a simulated variation's requests turn out.
type variation struct {
	errorRate float64   // ErrorRate
	buckets   []float64 // LatencyP95: the probability of each bucket of wire.LatencyBounds
}

// simulate runs simRuns experiments of simIntervals intervals checked by
// Check and returns, per run that breached, the requests per variation at
// the breach.
func simulate(t *testing.T, seed uint64, g Guardrail, control, treatment variation) []uint64 {
	t.Helper()
	return monitor(t, seed, simPerInterval, g.Metric, func(c, tr Counts) bool { return Check(g, c, tr).Breached }, control, treatment)
}

// monitor is simulate with any check and per requests per variation and
// interval.
func monitor(t *testing.T, seed, per uint64, metric Metric, check func(control, treatment Counts) bool, control, treatment variation) []uint64 {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var stops []uint64
	c := Counts{Bounds: wire.LatencyBounds}
	tr := Counts{Bounds: wire.LatencyBounds}
	if metric == LatencyP95 {
		c.Buckets = make([]uint64, len(wire.LatencyBounds)+1)
		tr.Buckets = make([]uint64, len(wire.LatencyBounds)+1)
	}
	for range simRuns {
		c.Requests, c.Errors, tr.Requests, tr.Errors = 0, 0, 0, 0
		clear(c.Buckets)
		clear(tr.Buckets)
		for range simIntervals {
			draw(r, &c, control, per)
			draw(r, &tr, treatment, per)
			if check(c, tr) {
				stops = append(stops, tr.Requests)
				break
			}
		}
	}
	return stops
}

// draw adds n requests of v to c: binomial and multinomial draws, exact.
func draw(r *rand.Rand, c *Counts, v variation, n uint64) {
	c.Requests += n
	if v.buckets == nil {
		c.Errors += binomial(r, n, v.errorRate)
		return
	}
	left, mass := n, 1.0
	for i, p := range v.buckets {
		if left == 0 {
			break
		}
		k := left
		if i < len(v.buckets)-1 && p < mass {
			k = binomial(r, left, p/mass)
		}
		c.Buckets[i] += k
		left -= k
		mass -= p
	}
}

// binomial draws Binomial(n, p) exactly by inverting its distribution
// function, in chunks of at most 500 trials so that (1−p)^n stays normal.
func binomial(r *rand.Rand, n uint64, p float64) uint64 {
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return n
	}
	if p > 0.5 {
		return n - binomial(r, n, 1-p)
	}
	var k uint64
	for n > 0 {
		m := min(n, 500)
		n -= m
		q := 1 - p
		s, a := p/q, float64(m+1)*p/q
		f := math.Pow(q, float64(m))
		u := r.Float64()
		var x uint64
		for u > f && x < m {
			u -= f
			x++
			f *= a/float64(x) - s
		}
		k += x
	}
	return k
}

// lognormal returns the bucket probabilities of wire.LatencyBounds for
// latencies whose logarithm is normal with the given median (ms) and
// standard deviation, recorded as the filter records them: in whole
// milliseconds, truncated, so a sample in the bucket up to b is a latency
// below ⌊b⌋+1 ms.
func lognormal(median, sigma float64) []float64 {
	p := make([]float64, len(wire.LatencyBounds)+1)
	prev := 0.0
	for i, b := range wire.LatencyBounds {
		cdf := 0.5 * math.Erfc(-(math.Log(math.Floor(b)+1)-math.Log(median))/(sigma*math.Sqrt2))
		p[i] = cdf - prev
		prev = cdf
	}
	p[len(p)-1] = 1 - prev
	return p
}

// maxFalseStops is alpha plus three standard errors of a rate alpha over
// simRuns runs, in runs.
func maxFalseStops(alpha float64) int {
	return int(simRuns * (alpha + 3*math.Sqrt(alpha*(1-alpha)/simRuns)))
}

// quantileOf is the q-quantile of xs (nearest rank).
func quantileOf(xs []uint64, q float64) uint64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

// stoppedWithin counts the stops at or before n requests per variation.
func stoppedWithin(stops []uint64, n uint64) int {
	k := 0
	for _, s := range stops {
		if s <= n {
			k++
		}
	}
	return k
}

// TestFalseStops: 1,000 experiments whose treatment keeps the guardrail,
// 1,000 requests per variation per interval, checked every interval for
// 100 intervals; at most alpha (0.05) of them may stop, plus three
// standard errors (at most 70 of 1,000). A/A experiments at the issue's
// thresholds (maxIncrease 0.01, maxRatio 1.2) hardly ever stop; at the
// strictest thresholds (0 and 1), and for errorRate a treatment exactly
// at the threshold, are the null's boundary, where the test's calibration
// shows. For latencyP95 a treatment at the threshold (+20% under
// maxRatio 1.2) is there for two shapes; for others the interpolation
// between Envoy's buckets can read it as above the threshold
// (docs/guardrails-statistics.md).
func TestFalseStops(t *testing.T) {
	errs := variation{errorRate: 0.01}
	lat := variation{buckets: lognormal(40, 0.6)}
	for i, tc := range []struct {
		name           string
		g              Guardrail
		control, treat variation
	}{
		{"A/A errorRate maxIncrease 0.01, 1% errors", Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}, errs, errs},
		{"A/A errorRate maxIncrease 0, 1% errors", Guardrail{Metric: ErrorRate, MinRequests: 1000}, errs, errs},
		{"A/A errorRate maxIncrease 0, 0.1% errors", Guardrail{Metric: ErrorRate, MinRequests: 1000}, variation{errorRate: 0.001}, variation{errorRate: 0.001}},
		{"A/A errorRate maxIncrease 0, 20% errors", Guardrail{Metric: ErrorRate, MinRequests: 1000}, variation{errorRate: 0.2}, variation{errorRate: 0.2}},
		{"errorRate maxIncrease 0.01, 1% against 2% errors", Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}, errs, variation{errorRate: 0.02}},
		{"A/A latencyP95 maxRatio 1.2, median 40 ms σ 0.6", Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}, lat, lat},
		{"A/A latencyP95 maxRatio 1, median 40 ms σ 0.6", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 1000}, lat, lat},
		{"A/A latencyP95 maxRatio 1, median 8 ms σ 0.3", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 1000}, variation{buckets: lognormal(8, 0.3)}, variation{buckets: lognormal(8, 0.3)}},
		{"A/A latencyP95 maxRatio 1, median 100 ms σ 1", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 1000}, variation{buckets: lognormal(100, 1)}, variation{buckets: lognormal(100, 1)}},
		{"A/A latencyP95 maxRatio 1, median 0.2 ms σ 0.5", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 1000}, variation{buckets: lognormal(0.2, 0.5)}, variation{buckets: lognormal(0.2, 0.5)}},
		{"latencyP95 maxRatio 1.2, median 40 ms σ 0.6, treatment +10%", Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}, lat, variation{buckets: lognormal(44, 0.6)}},
		{"latencyP95 maxRatio 1.2, median 40 ms σ 0.6, treatment +20%", Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}, lat, variation{buckets: lognormal(48, 0.6)}},
		{"latencyP95 maxRatio 1.2, median 5 ms σ 0.6, treatment +20%", Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}, variation{buckets: lognormal(5, 0.6)}, variation{buckets: lognormal(6, 0.6)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stops := simulate(t, uint64(100+i), tc.g, tc.control, tc.treat)
			t.Logf("%s: %d of %d experiments stopped (want ≤ %d)", tc.name, len(stops), simRuns, maxFalseStops(DefaultAlpha))
			if len(stops) > maxFalseStops(DefaultAlpha) {
				t.Errorf("%d of %d experiments stopped, want at most %d (alpha %g + 3 standard errors)", len(stops), simRuns, maxFalseStops(DefaultAlpha), DefaultAlpha)
			}
		})
	}
}

// TestFalseStopsSmallSamples: the same with 100 requests per variation
// per interval and the smallest minRequests an experiment may set (100):
// the first checks see 1 error or a p95 read from 5 requests, and the
// false-stop rate still stays at most alpha.
func TestFalseStopsSmallSamples(t *testing.T) {
	for i, tc := range []struct {
		name string
		g    Guardrail
		v    variation
	}{
		{"A/A errorRate maxIncrease 0, 1% errors", Guardrail{Metric: ErrorRate, MinRequests: 100}, variation{errorRate: 0.01}},
		{"A/A errorRate maxIncrease 0, 10% errors", Guardrail{Metric: ErrorRate, MinRequests: 100}, variation{errorRate: 0.1}},
		{"A/A latencyP95 maxRatio 1, median 40 ms σ 0.6", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 100}, variation{buckets: lognormal(40, 0.6)}},
		{"A/A latencyP95 maxRatio 1, median 100 ms σ 1", Guardrail{Metric: LatencyP95, MaxRatio: 1, MinRequests: 100}, variation{buckets: lognormal(100, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.g
			stops := monitor(t, uint64(400+i), 100, g.Metric, func(c, tr Counts) bool { return Check(g, c, tr).Breached }, tc.v, tc.v)
			t.Logf("%s, 100 requests per interval: %d of %d experiments stopped (want ≤ %d)", tc.name, len(stops), simRuns, maxFalseStops(DefaultAlpha))
			if len(stops) > maxFalseStops(DefaultAlpha) {
				t.Errorf("%d of %d experiments stopped, want at most %d", len(stops), simRuns, maxFalseStops(DefaultAlpha))
			}
		})
	}
}

// TestRepeatedFixedTestFalseStops shows that the simulation can tell a
// test that is not valid under continuous monitoring: a one-sided z-test
// at 0.05, repeated every interval, stops far more than 5% of A/A
// experiments.
func TestRepeatedFixedTestFalseStops(t *testing.T) {
	v := variation{errorRate: 0.01}
	z := func(c, tr Counts) bool {
		vc, _ := rateVariance(c)
		vt, _ := rateVariance(tr)
		diff := float64(tr.Errors)/float64(tr.Requests) - float64(c.Errors)/float64(c.Requests)
		return diff/math.Sqrt(vc+vt) > 1.645
	}
	stops := monitor(t, 7, simPerInterval, ErrorRate, z, v, v)
	t.Logf("repeated z-test: %d of %d A/A experiments stopped", len(stops), simRuns)
	if len(stops) <= maxFalseStops(DefaultAlpha) {
		t.Errorf("repeated z-test stopped %d of %d A/A experiments, want more than %d", len(stops), simRuns, maxFalseStops(DefaultAlpha))
	}
}

// TestErrorRateDetection: a treatment with 3% errors against a control
// with 1% (+2 percentage points), guarded by maxIncrease 0.01, is stopped
// within 10,000 requests per variation in at least 95% of 1,000
// simulations.
func TestErrorRateDetection(t *testing.T) {
	const within = 10_000
	g := Guardrail{Metric: ErrorRate, MaxIncrease: 0.01, MinRequests: 1000}
	stops := simulate(t, 200, g, variation{errorRate: 0.01}, variation{errorRate: 0.03})
	k := stoppedWithin(stops, within)
	t.Logf("%d of %d stopped within %d requests per variation (all stopped: %d; median %d)", k, simRuns, within, len(stops), quantileOf(stops, 0.5))
	if k < simRuns*95/100 {
		t.Errorf("%d of %d stopped within %d requests per variation, want at least 95%%", k, simRuns, within)
	}
}

// TestLatencyDetection: a treatment 30% slower than the control (every
// latency × 1.3), guarded by maxRatio 1.2, is stopped within 20,000
// requests per variation (50,000 for a wide distribution, σ 1) in at least
// 95% of 1,000 simulations.
func TestLatencyDetection(t *testing.T) {
	g := Guardrail{Metric: LatencyP95, MaxRatio: 1.2, MinRequests: 1000}
	for i, tc := range []struct {
		name          string
		median, sigma float64
		within        uint64
	}{
		{"median 40 ms σ 0.6", 40, 0.6, 20_000},
		{"median 100 ms σ 0.6", 100, 0.6, 20_000},
		{"median 20 ms σ 1", 20, 1, 50_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stops := simulate(t, uint64(300+i), g, variation{buckets: lognormal(tc.median, tc.sigma)}, variation{buckets: lognormal(1.3*tc.median, tc.sigma)})
			k := stoppedWithin(stops, tc.within)
			t.Logf("%d of %d stopped within %d requests per variation (all stopped: %d; median %d)", k, simRuns, tc.within, len(stops), quantileOf(stops, 0.5))
			if k < simRuns*95/100 {
				t.Errorf("%d of %d stopped within %d requests per variation, want at least 95%%", k, simRuns, tc.within)
			}
		})
	}
}
