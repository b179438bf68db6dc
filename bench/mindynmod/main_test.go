package main

import (
	"fmt"
	"testing"

	"github.com/allotmesh/allot/filter/engine"
)

// TestVariationMatchesEngine pins the module's hash to Allot's engine
// (GrowthBook hash v1), so variants N, E and Allot's add the same header
// value for the same id.
func TestVariationMatchesEngine(t *testing.T) {
	for i := range 2000 {
		id := fmt.Sprintf("user-%d", i)
		n, _ := engine.Hash(seed, id, 1)
		want := "treatment"
		if n < 0.5 {
			want = "control"
		}
		if got := Variation(id); got != want {
			t.Fatalf("Variation(%q) = %q, engine says %q", id, got, want)
		}
	}
}
