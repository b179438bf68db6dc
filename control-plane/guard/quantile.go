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

// edge is the latency (ms) below which a sample the filter recorded in
// whole milliseconds, truncated, is at most the bucket bound b: ⌊b⌋ + 1.
func edge(b float64) float64 { return math.Floor(b) + 1 }

// estimateQuantile reads the q-quantile of the latencies behind a
// histogram (buckets per bound, the last above every bound), or says why
// it cannot. The filter records whole milliseconds, truncated, so the
// share of samples up to a bound b is that of latencies below edge(b):
// the estimate is of the latency itself, not of its truncation.
//
// Above the first edge it interpolates the share of requests slower than
// x, S(x), on log-log axes with a monotone cubic (Fritsch and Butland's
// PCHIP) through the edges around the quantile: a latency tail is close
// to a smooth curve there, so the estimate follows a change of scale
// across Envoy's buckets (twice to two and a half times wide) far better
// than a straight line in x (docs/guardrails-statistics.md has the
// figures). A share of 0 is read as half a request. The first bucket
// (from 0 ms) is interpolated linearly.
//
// The variance of log value is the delta method's on the shares it reads,
// which are nested tails of one multinomial sample:
// Var Ŝⱼ = Sⱼ(1−Sⱼ)/n and Cov(Ŝⱼ, Ŝₗ) = Sₗ(1−Sⱼ)/n for bⱼ < bₗ.
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
	i := 0
	for ; i < len(buckets); i++ {
		if b := buckets[i]; b > 0 && float64(below+b) >= rank {
			break
		}
		below += buckets[i]
	}
	if i == len(bounds) {
		return e, fmt.Sprintf("p%g above the last latency bound (%g ms)", 100*q, bounds[len(bounds)-1])
	}
	e.tail = buckets[i]
	if i == 0 {
		// Uniform on [0, e₀]: q̂ = e₀·q/F̂, so
		// Var(log q̂) = Var(F̂)/F² = (1−F)/(nF), with 1−F read as at
		// least half a request.
		f := float64(e.tail) / n
		e.value = edge(bounds[0]) * q / f
		e.logVar = max(1-f, 0.5/n) / (f * n)
		return e, ""
	}
	// The nodes: the bounds i−2 … i+1 that exist (the bucket is
	// (bounds[i−1], bounds[i]]), their tail shares S and log-log points.
	var c curve
	first := max(i-2, 0)
	last := min(i+1, len(bounds)-1)
	c.k = i - 1 - first
	cum := below
	for j := i - 2; j >= first; j-- {
		cum -= buckets[j+1]
	}
	for j := first; j <= last; j++ {
		if j > first {
			cum += buckets[j]
		}
		s := max(1-float64(cum)/n, 0.5/n)
		c.s[c.len] = s
		c.x[c.len] = math.Log(edge(bounds[j]))
		c.y[c.len] = math.Log(s)
		c.len++
	}
	target := math.Log(1 - q)
	lq := c.solve(target)
	e.value = math.Exp(lq)
	// d log q̂ / d log Sⱼ by central differences; then
	// Var(log q̂) = Σⱼₗ gⱼ gₗ Cov(Ŝⱼ, Ŝₗ)/(Sⱼ Sₗ).
	var g [4]float64
	for j := range c.len {
		h := 1e-6
		y := c.y[j]
		c.y[j] = y + h
		up := c.solve(target)
		c.y[j] = y - h
		down := c.solve(target)
		c.y[j] = y
		g[j] = (up - down) / (2 * h)
	}
	for j := range c.len {
		for l := range c.len {
			lo, hi := min(j, l), max(j, l)
			e.logVar += g[j] * g[l] * c.s[hi] * (1 - c.s[lo]) / (c.s[j] * c.s[l])
		}
	}
	e.logVar /= n
	return e, ""
}

// curve is a monotone cubic through up to four points (x: log bound, y:
// log tail share) whose segment k (from point k to k+1) holds the
// quantile.
type curve struct {
	x, y, s [4]float64
	len     int
	k       int
}

// slope is PCHIP's derivative at point j: the weighted harmonic mean of
// the neighbouring secants (0 where they differ in sign), one secant at
// the ends.
func (c *curve) slope(j int) float64 {
	secant := func(a int) float64 { return (c.y[a+1] - c.y[a]) / (c.x[a+1] - c.x[a]) }
	if j == 0 {
		return secant(0)
	}
	if j == c.len-1 {
		return secant(j - 1)
	}
	d0, d1 := secant(j-1), secant(j)
	if d0*d1 <= 0 {
		return 0
	}
	h0, h1 := c.x[j]-c.x[j-1], c.x[j+1]-c.x[j]
	w0, w1 := 2*h1+h0, h1+2*h0
	return (w0 + w1) / (w0/d0 + w1/d1)
}

// solve returns the x of segment k where the curve equals y (the curve is
// decreasing there, from above y to at most y), by bisection.
func (c *curve) solve(y float64) float64 {
	k := c.k
	h := c.x[k+1] - c.x[k]
	y0, y1 := c.y[k], c.y[k+1]
	m0, m1 := c.slope(k)*h, c.slope(k+1)*h
	lo, hi := 0.0, 1.0
	for range 48 {
		u := (lo + hi) / 2
		u2, u3 := u*u, u*u*u
		v := (2*u3-3*u2+1)*y0 + (u3-2*u2+u)*m0 + (-2*u3+3*u2)*y1 + (u3-u2)*m1
		if v > y {
			lo = u
		} else {
			hi = u
		}
	}
	return c.x[k] + (lo+hi)/2*h
}
