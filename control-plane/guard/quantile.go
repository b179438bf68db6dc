package guard

import (
	"fmt"
	"math"
)

// estimate is a latency quantile read from a histogram.
type estimate struct {
	value  float64 // the quantile (ms)
	logVar float64 // the estimated variance of log value
	n      uint64  // timed requests
	tail   uint64  // timed requests in the bucket holding the quantile
}

// estimateQuantile reads the q-quantile of a histogram (buckets per
// bound, the last above every bound), or says why it cannot. Within the
// bucket holding it, the share of requests slower than x is interpolated
// as a power of x (a straight line on log-log axes, the shape of a
// latency tail), which follows a change of scale across Envoy's buckets
// (twice to two and a half times wide) far better than a straight line in
// x: docs/guardrails-statistics.md has the figures. The first bucket
// (from 0 ms) is interpolated linearly. The variance of the logarithm of
// the estimate is the delta method's on the tail shares it reads.
func estimateQuantile(bounds []float64, buckets []uint64, q float64) (estimate, string) {
	var e estimate
	if len(buckets) == 0 {
		return e, "no timed requests"
	}
	if len(buckets) != len(bounds)+1 {
		return e, fmt.Sprintf("%d latency buckets for %d bounds, want %d", len(buckets), len(bounds), len(bounds)+1)
	}
	for i, b := range bounds {
		if !(b > 0) || math.IsInf(b, 1) || i > 0 && !(b > bounds[i-1]) {
			return e, fmt.Sprintf("latency bounds[%d]: %g, want finite, positive and increasing", i, b)
		}
	}
	for _, b := range buckets {
		if e.n+b < e.n {
			return e, "latency buckets overflow"
		}
		e.n += b
	}
	if e.n == 0 {
		return e, "no timed requests"
	}
	n := float64(e.n)
	rank := q * n
	var below uint64
	for i, b := range buckets {
		if b == 0 || float64(below+b) < rank {
			below += b
			continue
		}
		if i == len(bounds) {
			return e, fmt.Sprintf("p%g above the last latency bound (%g ms)", 100*q, bounds[len(bounds)-1])
		}
		e.tail = b
		hi := bounds[i]
		if i == 0 {
			// Uniform on [0, hi]: q̂ = hi·q/F̂(hi), so
			// Var(log q̂) = Var(F̂)/F² = (1−F)/(nF), with 1−F read as at
			// least half a request, like sHi below.
			f := float64(b) / n
			e.value = hi * q / f
			e.logVar = max(1-f, 0.5/n) / (f * n)
			return e, ""
		}
		// S(x) = sLo (x/lo)^−a through (lo, sLo) and (hi, sHi):
		// log q̂ = log lo + L·A/B with L = log(hi/lo), A = log(sLo/(1−q)),
		// B = log(sLo/sHi). A bucket holding the slowest requests (sHi = 0)
		// is read as if half a request were slower than hi.
		lo := bounds[i-1]
		sLo, sHi := 1-float64(below)/n, max(1-float64(below+b)/n, 0.5/n)
		l, a, bb := math.Log(hi/lo), math.Log(sLo/(1-q)), math.Log(sLo/sHi)
		e.value = lo * math.Exp(l*a/bb)
		// The delta method on the two tail shares it reads, whose
		// covariances are those of nested tails of one multinomial sample:
		// Var Ŝ = S(1−S)/n, Cov(Ŝlo, Ŝhi) = sHi(1−sLo)/n.
		dLo := l * (bb - a) / (sLo * bb * bb)
		dHi := l * a / (sHi * bb * bb)
		e.logVar = (dLo*dLo*sLo*(1-sLo) + dHi*dHi*sHi*(1-sHi) + 2*dLo*dHi*sHi*(1-sLo)) / n
		return e, ""
	}
	return e, "no timed requests"
}
