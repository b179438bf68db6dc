package minimal

import (
	"fmt"
	"testing"

	"github.com/allotmesh/allot/filter/engine"
)

// TestVariationMatchesEngine pins the minimal filters' hash to Allot's
// engine (GrowthBook hash v1), so variants E, N and Allot's add the same
// header value for the same id.
func TestVariationMatchesEngine(t *testing.T) {
	for i := range 2000 {
		id := fmt.Sprintf("user-%d", i)
		n, _ := engine.Hash(Seed, id, 1)
		want := "treatment"
		if n < 0.5 {
			want = "control"
		}
		if got := Variation(id); got != want {
			t.Fatalf("Variation(%q) = %q, engine says %q", id, got, want)
		}
	}
}
