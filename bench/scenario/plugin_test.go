package scenario

import (
	"testing"
)

func TestProfileAllot(t *testing.T) {
	hp, err := profileAllot(1, false)
	if err != nil {
		t.Fatal(err)
	}
	// x-experiment-bench, x-experiments and x-experiments-version.
	if hp.HeadersAdded != 3 {
		t.Errorf("1 experiment: %.2f headers added per request, want 3", hp.HeadersAdded)
	}
	lean, err := profileAllot(50, true)
	if err != nil {
		t.Fatal(err)
	}
	// x-experiments and x-experiments-version, in at most three host calls.
	if lean.HeadersAdded != 2 || lean.TotalCalls > 3 {
		t.Errorf("50 experiments, lean: %.2f headers added and %.2f host calls per request, want 2 and ≤ 3", lean.HeadersAdded, lean.TotalCalls)
	}
}
