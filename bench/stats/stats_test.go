package stats

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	sorted := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0: 1, 0.5: 5, 0.9: 9, 0.99: 10, 1: 10} {
		if got := Quantile(sorted, q); got != want {
			t.Errorf("Quantile(1..10, %v) = %v, want %v", q, got, want)
		}
	}
	if got := Quantile([]float64(nil), 0.5); got != 0 {
		t.Errorf("Quantile of none = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2, 10}
	if got := Median(xs); got != 2.5 {
		t.Errorf("Median(3 1 2 10) = %v, want 2.5", got)
	}
	if xs[0] != 3 {
		t.Error("Median sorted its input")
	}
	if got := Median([]float64{4, 1, 9}); got != 4 {
		t.Errorf("Median(4 1 9) = %v, want 4", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median of none = %v", got)
	}
}

func TestRoundDiffsAndRatios(t *testing.T) {
	if d, ok := RoundDiffs([]float64{5, 7}, []float64{1, 2}); !ok || d[0] != 4 || d[1] != 5 {
		t.Errorf("RoundDiffs = %v, %v", d, ok)
	}
	if _, ok := RoundDiffs([]float64{1}, []float64{1, 2}); ok {
		t.Error("RoundDiffs of figures from different rounds")
	}
	if r, ok := Ratios([]float64{6, 9}, []float64{2, 3}); !ok || r[0] != 3 || r[1] != 3 {
		t.Errorf("Ratios = %v, %v", r, ok)
	}
	if _, ok := Ratios([]float64{1}, []float64{0}); ok {
		t.Error("Ratios divided by 0")
	}
}

// TestBootstrap: the intervals hold the median, a constant has no spread,
// and a y adding nothing gives an unbounded ratio.
func TestBootstrap(t *testing.T) {
	d := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	lo, hi := BootstrapMedian(d)
	if m := Median(d); lo > m || hi < m || lo >= hi {
		t.Errorf("BootstrapMedian = [%v, %v] around median %v", lo, hi, m)
	}
	if lo, hi := BootstrapMedian([]float64{2, 2, 2}); lo != 2 || hi != 2 {
		t.Errorf("BootstrapMedian of a constant = [%v, %v]", lo, hi)
	}
	if lo, hi := BootstrapRatio([]float64{4, 4, 4}, []float64{2, 2, 2}); lo != 2 || hi != 2 {
		t.Errorf("BootstrapRatio(4/2) = [%v, %v]", lo, hi)
	}
	if _, hi := BootstrapRatio([]float64{1, 1, 1}, []float64{0, 0, 0}); !math.IsInf(hi, 1) {
		t.Errorf("BootstrapRatio over nothing: hi = %v, want +Inf", hi)
	}
	if Direction(-2, -1) != "faster" || Direction(1, 2) != "slower" || Direction(-1, 1) != "" {
		t.Error("Direction")
	}
}

// TestBootstrapQuantileRatio: the interval holds the ratio of the
// quantiles, and a constant ratio per round gives exactly that ratio.
func TestBootstrapQuantileRatio(t *testing.T) {
	x := []float64{12, 15, 11, 30, 14, 13, 16, 12, 18, 20}
	y := make([]float64, len(x))
	for i := range x {
		y[i] = x[i] / 2
	}
	lo, hi := BootstrapQuantileRatio(x, y, 0.99)
	if lo != 2 || hi != 2 {
		t.Errorf("constant ratio 2: interval %v … %v, want 2 … 2", lo, hi)
	}
	y = []float64{10, 6, 9, 7, 8, 12, 5, 11, 6, 9}
	lo, hi = BootstrapQuantileRatio(x, y, 0.5)
	pt := Median(x) / Median(y)
	if lo > pt || hi < pt || lo >= hi {
		t.Errorf("interval %v … %v does not hold the point %v", lo, hi, pt)
	}
}
