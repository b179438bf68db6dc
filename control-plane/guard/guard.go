// Package guard decides whether a treatment variation breaches a guardrail
// against the control variation, from the cumulative outcome counts since
// the experiment's assignment revision: a one-sided mixture sequential
// probability ratio test (mSPRT) whose p-value is always valid, so that
// allotd may check after every interval and still stop a harmless
// treatment with probability at most the guardrail's alpha over the whole
// revision. docs/guardrails-statistics.md states the test, its parameters,
// its assumptions and its sources.
//
// It is pure: no store, no clock, no I/O, no logging. It imports only the
// standard library; every control-plane package may import it (experiment
// and outcomes do).
package guard

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Metric names what a guardrail compares; the names are the ones an
// experiment's guardrails carry.
type Metric string

// The metrics a guardrail can compare.
const (
	// ErrorRate is the share of 5xx among a variation's answered requests.
	// Its threshold is Guardrail.MaxIncrease.
	ErrorRate Metric = "errorRate"
	// LatencyP95 is the 95th percentile of a variation's latency
	// histogram. Its threshold is Guardrail.MaxRatio.
	LatencyP95 Metric = "latencyP95"
)

const (
	// DefaultAlpha is a guardrail's false-stop rate when Guardrail.Alpha is
	// 0: the probability that one guardrail ever breaches, over every check
	// of one revision, for one treatment that keeps the guardrail.
	DefaultAlpha = 0.05
	// PlannedRequests is the requests per variation at which the mixture is
	// tuned to be most sensitive (the mixing variance τ² = ρ²σ², with ρ
	// chosen so the boundary is tightest there, as GrowthBook does); a
	// tuning choice that changes how fast a breach is found, never the
	// false-stop rate.
	PlannedRequests = 10_000
	// MinTailRequests is the fewest timed requests a variation needs in the
	// bucket holding its p95 before latencyP95 is tested: the p95 and its
	// variance are read from the shares around that bucket.
	MinTailRequests = 20
	// quantile is the latency quantile latencyP95 compares.
	quantile = 0.95
)

// Guardrail is one limit a treatment must keep against the control.
type Guardrail struct {
	// Metric is what is compared.
	Metric Metric
	// MaxIncrease is ErrorRate's threshold: the largest allowed increase of
	// the treatment's error rate over the control's, absolute, in [0, 1].
	MaxIncrease float64
	// MaxRatio is LatencyP95's threshold: the largest allowed ratio of the
	// treatment's p95 to the control's, at least 1.
	MaxRatio float64
	// MinRequests is the fewest requests (for latencyP95: timed requests)
	// each of the control and the treatment needs before any decision.
	// The caller passes the experiment's value or its default.
	MinRequests uint64
	// Alpha is the false-stop rate, in (0, 0.5]; 0 means DefaultAlpha.
	Alpha float64
}

// Counts are one variation's cumulative outcomes since the revision.
type Counts struct {
	// Requests are the responses of every class.
	Requests uint64
	// Errors are the responses of class 5xx.
	Errors uint64
	// Buckets are the timed requests per latency bucket (not cumulative):
	// len(Bounds)+1 of them, the last above every bound; none when no
	// request was timed.
	Buckets []uint64
	// Bounds are the buckets' upper bounds in milliseconds, increasing
	// (allotd's wire.LatencyBounds; the filter records whole
	// milliseconds, truncated, so below 1 ms every latency reads 0).
	Bounds []float64
}

// Decision is the result of one check of one guardrail for one treatment.
type Decision struct {
	// Breached says the always-valid p-value fell to Alpha or below: the
	// evidence says the treatment breaks the guardrail.
	Breached bool
	// Evaluated says the counts were enough to test (every minimum met and
	// the input valid); when false, Reason says why and Breached is false.
	Evaluated bool
	// Statistic is log Λ, the logarithm of the mixture likelihood ratio;
	// Breached is Statistic ≥ log(1/Alpha).
	Statistic float64
	// PValue is the always-valid p-value at this check, min(1, 1/Λ).
	PValue float64
	// Estimate is the treatment's error rate less the control's
	// (errorRate), or the ratio of their p95s (latencyP95).
	Estimate float64
	// Threshold is the guardrail's MaxIncrease or MaxRatio.
	Threshold float64
	// Control and Treatment are each variation's error rate or p95 (ms).
	Control, Treatment float64
	// Reason says, in a few words, why the decision is what it is.
	Reason string
}

// Check tests whether treatment breaks g against control. It is
// deterministic, allocates only to format its reason and never panics: an
// invalid guardrail or inconsistent counts give a decision that is not
// evaluated, with the reason naming the field.
func Check(g Guardrail, control, treatment Counts) Decision {
	alpha := g.Alpha
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if !(alpha > 0 && alpha <= 0.5) {
		return Decision{Reason: fmt.Sprintf("alpha: %g, want in (0, 0.5]", alpha)}
	}
	switch g.Metric {
	case ErrorRate:
		return checkErrorRate(g, alpha, control, treatment)
	case LatencyP95:
		return checkLatency(g, alpha, control, treatment)
	}
	return Decision{Reason: fmt.Sprintf("metric: %q, want %q or %q", g.Metric, ErrorRate, LatencyP95)}
}

// checkErrorRate tests H0: p_t − p_c ≤ MaxIncrease.
func checkErrorRate(g Guardrail, alpha float64, c, t Counts) Decision {
	d := Decision{Threshold: g.MaxIncrease}
	if !(g.MaxIncrease >= 0 && g.MaxIncrease <= 1) { // 1 holds always: no rate exceeds another by more
		d.Reason = fmt.Sprintf("maxIncrease: %g, want in [0, 1]", g.MaxIncrease)
		return d
	}
	for _, v := range [...]struct {
		name string
		c    Counts
	}{{"control", c}, {"treatment", t}} {
		if v.c.Errors > v.c.Requests {
			d.Reason = fmt.Sprintf("%s: %d errors of %d requests", v.name, v.c.Errors, v.c.Requests)
			return d
		}
	}
	if c.Requests > 0 {
		d.Control = float64(c.Errors) / float64(c.Requests)
	}
	if t.Requests > 0 {
		d.Treatment = float64(t.Errors) / float64(t.Requests)
	}
	d.Estimate = d.Treatment - d.Control
	if n := min(c.Requests, t.Requests); n < max(g.MinRequests, 1) {
		d.Reason = fmt.Sprintf("%d requests, want %d per variation", n, max(g.MinRequests, 1))
		return d
	}
	// The variance of each rate is estimated from (errors+1)/(requests+2),
	// which is never 0 or 1, so that no errors at all still have a
	// variance (a rate of 0 would otherwise make any difference certain).
	vc, sc := rateVariance(c)
	vt, st := rateVariance(t)
	return decide(d, alpha, d.Estimate-g.MaxIncrease, vc+vt, sc+st, "treatment's error rate over control's + maxIncrease")
}

// rateVariance returns the estimated variance of a variation's error rate
// and of one request's error indicator.
func rateVariance(c Counts) (rate, request float64) {
	p := (float64(c.Errors) + 1) / (float64(c.Requests) + 2)
	request = p * (1 - p)
	return request / float64(c.Requests), request
}

// checkLatency tests H0: log q_t − log q_c ≤ log MaxRatio.
func checkLatency(g Guardrail, alpha float64, c, t Counts) Decision {
	d := Decision{Threshold: g.MaxRatio}
	if !(g.MaxRatio >= 1 && !math.IsInf(g.MaxRatio, 1)) {
		d.Reason = fmt.Sprintf("maxRatio: %g, want at least 1", g.MaxRatio)
		return d
	}
	qc, ok := estimateQuantile(c.Bounds, c.Buckets, quantile)
	if ok != "" {
		d.Reason = "control: " + ok
		return d
	}
	if !slices.Equal(c.Bounds, t.Bounds) {
		d.Reason = "treatment: latency bounds differ from the control's"
		return d
	}
	qt, ok := estimateQuantile(t.Bounds, t.Buckets, quantile)
	if ok != "" {
		d.Reason = "treatment: " + ok
		return d
	}
	d.Control, d.Treatment = qc.value, qt.value
	if qc.value > 0 {
		d.Estimate = qt.value / qc.value
	}
	if n := min(qc.n, qt.n); n < max(g.MinRequests, 1) {
		d.Reason = fmt.Sprintf("%d timed requests, want %d per variation", n, max(g.MinRequests, 1))
		return d
	}
	if n := min(qc.tail, qt.tail); n < MinTailRequests {
		d.Reason = fmt.Sprintf("%d timed requests in the p95's bucket, want %d per variation", n, MinTailRequests)
		return d
	}
	if qc.value <= 0 || qt.value <= 0 {
		d.Reason = "a p95 of 0 ms"
		return d
	}
	return decide(d, alpha, math.Log(qt.value)-math.Log(qc.value)-math.Log(g.MaxRatio),
		qc.logVar+qt.logVar, qc.logVar*float64(qc.n)+qt.logVar*float64(qt.n), "treatment's p95 over control's × maxRatio")
}

// decide completes d with the one-sided mixture test of H0: δ ≤ 0, where
// excess is the estimate of δ (the estimate less the threshold), v its
// estimated variance and s2 the variance of one request's contribution
// (v ≈ s2/n with n requests per variation).
func decide(d Decision, alpha, excess, v, s2 float64, what string) Decision {
	d.Evaluated = true
	logL := logMixture(excess, v, rho2(alpha)*s2)
	d.Statistic = logL
	d.PValue = math.Min(1, math.Exp(-logL))
	d.Breached = logL >= -math.Log(alpha)
	d.Reason = verdict(what, d.Breached, d.PValue, alpha)
	return d
}

// verdict is an evaluated check's reason, "<what>: p = 0.00123 ≤ alpha
// 0.05" or "<what> not shown: p = … > alpha …", formatted as fmt's %.3g
// and %g would but in one allocation and without fmt's pool, which the
// race detector drains at random (TestCheckAllocations counts it).
func verdict(what string, breached bool, p, alpha float64) string {
	var buf [160]byte
	b := append(buf[:0], what...)
	if breached {
		b = append(b, ": p = "...)
	} else {
		b = append(b, " not shown: p = "...)
	}
	b = strconv.AppendFloat(b, p, 'g', 3, 64)
	if breached {
		b = append(b, " ≤ alpha "...)
	} else {
		b = append(b, " > alpha "...)
	}
	return string(strconv.AppendFloat(b, alpha, 'g', -1, 64))
}

// rho2 is ρ², the mixing variance per unit of a request's variance:
// (−2 ln α + ln(1 − 2 ln α)) / N*, which makes the two-sided
// normal-mixture boundary tightest near N* = PlannedRequests per variation
// (Howard et al. 2021; GrowthBook's sequential testing tunes it the same
// way).
func rho2(alpha float64) float64 {
	l := -2 * math.Log(alpha)
	return (l + math.Log(l+1)) / PlannedRequests
}

// logMixture is log Λ for an estimate x of δ with variance v, mixing over
// δ > 0 with a half-normal of scale τ (tau2 = τ²):
//
//	Λ = 2 √(v/(v+τ²)) · exp(z²/2) · Φ(z),  z = x τ / √(v (v+τ²)).
//
// Each likelihood ratio it mixes, of a δ > 0 against δ = 0, is a
// supermartingale under every δ ≤ 0, so Λ is too (Ville: it reaches 1/α
// with probability at most α) — under the normal approximation of x.
func logMixture(x, v, tau2 float64) float64 {
	if !(v > 0) || !(tau2 > 0) || math.IsNaN(x) {
		return math.Inf(-1)
	}
	z := x * math.Sqrt(tau2/(v*(v+tau2)))
	return math.Ln2 + 0.5*math.Log(v/(v+tau2)) + logPhiExp(z)
}

// logPhiExp is log(exp(z²/2) Φ(z)), accurate for very negative z too.
func logPhiExp(z float64) float64 {
	if z > -30 {
		return z*z/2 + math.Log(0.5*math.Erfc(-z/math.Sqrt2))
	}
	// Mills ratio: exp(z²/2) Φ(z) → 1/(|z| √(2π)) (1 − 1/z² + 3/z⁴).
	return -math.Log(-z) - 0.5*math.Log(2*math.Pi) + math.Log1p(-1/(z*z)+3/(z*z*z*z))
}
