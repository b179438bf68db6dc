// Package stats is the benchmark's statistics: nearest-rank quantiles, the
// median, per-round differences and ratios of figures measured in the same
// rounds, and 95% bootstrap intervals over the rounds. It is pure: it
// imports only the standard library.
package stats

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Quantile returns the q-quantile (0..1) of sorted, by nearest rank: the
// element at rank q·n (rounded half up), clamped to the slice; the zero
// value when sorted is empty.
func Quantile[T cmp.Ordered](sorted []T, q float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Median returns the median of xs (the mean of the middle two for an even
// count), 0 for none; xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// RoundDiffs are x[i] − y[i] for two figures measured in the same rounds
// (ok false unless both have every round).
func RoundDiffs(x, y []float64) ([]float64, bool) {
	if len(x) == 0 || len(x) != len(y) {
		return nil, false
	}
	d := make([]float64, len(x))
	for i := range x {
		d[i] = x[i] - y[i]
	}
	return d, true
}

// Ratios are x[i] / y[i] for two figures measured in the same rounds (ok
// false unless both have every round and no y[i] is 0).
func Ratios(x, y []float64) ([]float64, bool) {
	if len(x) == 0 || len(x) != len(y) {
		return nil, false
	}
	r := make([]float64, len(x))
	for i := range x {
		if y[i] == 0 {
			return nil, false
		}
		r[i] = x[i] / y[i]
	}
	return r, true
}

// Unresolved is the verdict on a difference whose 95% interval includes 0.
const Unresolved = "no difference this run resolves"

// Direction is which way a difference's 95% interval [lo, hi] lies from 0:
// "faster" wholly below, "slower" wholly above, "" when it includes 0.
func Direction(lo, hi float64) string {
	switch {
	case hi < 0:
		return "faster"
	case lo > 0:
		return "slower"
	}
	return ""
}

// Resamples is how many times the bootstrap intervals draw the rounds.
const Resamples = 10000

// BootstrapRatio is the 95% bootstrap interval of median(dx) / median(dy),
// where dx[i] and dy[i] were measured in the same round (each against the
// baseline of its round): the rounds are resampled together. A resample in
// which y adds nothing gives an unbounded ratio.
func BootstrapRatio(dx, dy []float64) (lo, hi float64) {
	rx, ry := make([]float64, len(dx)), make([]float64, len(dy))
	return resample(len(dx), func(idx []int) float64 {
		for i, j := range idx {
			rx[i], ry[i] = dx[j], dy[j]
		}
		mx, my := Median(rx), Median(ry)
		switch {
		case my > 0:
			return mx / my
		case mx >= 0:
			return math.Inf(1)
		}
		return math.Inf(-1)
	})
}

// BootstrapQuantileRatio is the 95% bootstrap interval of the q-quantile
// of x over that of y, where x[i] and y[i] were measured in the same round:
// the rounds are resampled together.
func BootstrapQuantileRatio(x, y []float64, q float64) (lo, hi float64) {
	rx, ry := make([]float64, len(x)), make([]float64, len(y))
	return resample(len(x), func(idx []int) float64 {
		for i, j := range idx {
			rx[i], ry[i] = x[j], y[j]
		}
		slices.Sort(rx)
		slices.Sort(ry)
		if qy := Quantile(ry, q); qy > 0 {
			return Quantile(rx, q) / qy
		}
		return math.Inf(1)
	})
}

// BootstrapMedian is the 95% bootstrap interval of the median of d.
func BootstrapMedian(d []float64) (lo, hi float64) {
	r := make([]float64, len(d))
	return resample(len(d), func(idx []int) float64 {
		for i, j := range idx {
			r[i] = d[j]
		}
		return Median(r)
	})
}

// resample is the 95% percentile interval of stat over Resamples
// resamples with replacement of n rounds (stat gets the rounds' indices).
// The generator's seed is fixed, so a report rendered again from the same
// results is identical.
func resample(n int, stat func(idx []int) float64) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	idx := make([]int, n)
	vals := make([]float64, Resamples)
	for k := range vals {
		for i := range idx {
			idx[i] = rng.IntN(n)
		}
		vals[k] = stat(idx)
	}
	slices.Sort(vals)
	return vals[Resamples*25/1000], vals[Resamples*975/1000-1]
}
