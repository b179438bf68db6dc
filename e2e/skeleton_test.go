//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/internal/harness"
)

// TestWalkingSkeleton follows one experiment along the whole path: admin API
// → bbolt store → xDS (ECDS) → Envoy 1.40 → Allot Wasm filter → request
// header → the service (the echo upstream).
func TestWalkingSkeleton(t *testing.T) { forArtifacts(t, testWalkingSkeleton) }

func testWalkingSkeleton(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	p := s.startSidecar("sidecar-1", "checkout-svc")

	// Before any experiment: Envoy serves, assigns nothing, strips forgeries.
	r, err := p.get(map[string][]string{"x-user-id": {"alice"}, "x-experiment-checkout": {"forged"}})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Header("x-experiment-checkout"); len(v) != 0 {
		t.Fatalf("with no experiment the upstream saw %q", v)
	}

	def := map[string]any{"key": "checkout", "variations": []string{"control", "treatment"}, "weights": []float64{0.5, 0.5}}
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", def, nil)

	// The engine's own assignment is the oracle.
	set := compile(t, def)
	want := func(id string) string {
		a := set.Assign(nil, engine.Attributes{"id": id})[0]
		if !a.InExperiment {
			return ""
		}
		return a.Value
	}
	harness.MustEventually(t, 10*time.Second, func() error {
		r, err := p.get(map[string][]string{"x-user-id": {"probe"}})
		if err != nil {
			return err
		}
		if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want("probe") {
			return fmt.Errorf("x-experiment-checkout = %q, want [%s]", v, want("probe"))
		}
		return nil
	})

	// Mesh admins debug with /config_dump: the filter configuration must be
	// readable there, not an opaque blob.
	if dump := string(p.MustConfigDump(t)); !strings.Contains(dump, `"variations"`) || !strings.Contains(dump, `"treatment"`) {
		t.Errorf("config_dump does not show the filter configuration readably:\n%.2000s", dump)
	}

	t.Run("2000 users get the engine's assignment, split 47-53%", func(t *testing.T) {
		counts := map[string]int{}
		for i := range 2000 {
			id := fmt.Sprintf("user-%04d", i)
			r, err := p.get(map[string][]string{"x-user-id": {id}})
			if err != nil {
				t.Fatal(err)
			}
			v := r.Header("x-experiment-checkout")
			if len(v) != 1 || v[0] != want(id) {
				t.Fatalf("%s: x-experiment-checkout = %q, want exactly [%s]", id, v, want(id))
			}
			counts[v[0]]++
		}
		for _, variation := range []string{"control", "treatment"} {
			share := float64(counts[variation]) / 2000
			if share < 0.47 || share > 0.53 {
				t.Errorf("%s got %.1f%% of 2000 users, want 47-53%%", variation, 100*share)
			}
		}
		t.Logf("split: %v", counts)
	})

	t.Run("a forged assignment header never reaches the service", func(t *testing.T) {
		r, err := p.get(map[string][]string{
			"x-user-id":             {"alice"},
			"x-experiment-checkout": {"forged", "forged-again"},
			"x-experiment-other":    {"forged"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want("alice") {
			t.Fatalf("upstream saw x-experiment-checkout %q, want only the assigned [%s]", v, want("alice"))
		}
		if v := r.Header("x-experiment-other"); len(v) != 0 {
			t.Fatalf("upstream saw forged x-experiment-other %q", v)
		}
	})

	t.Run("ramping to 100% shows everywhere within 2s", func(t *testing.T) {
		var cur map[string]any
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/checkout", nil, &cur)
		def["weights"] = []float64{0, 1}
		def["revision"] = cur["revision"]
		start := time.Now()
		s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/checkout", def, nil)
		harness.MustEventually(t, 2*time.Second, func() error {
			for i := range 50 {
				id := fmt.Sprintf("ramp-%d", i)
				r, err := p.get(map[string][]string{"x-user-id": {id}})
				if err != nil {
					return err
				}
				if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
					return fmt.Errorf("%s: x-experiment-checkout = %q, want [treatment]", id, v)
				}
			}
			return nil
		})
		t.Logf("update visible after %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("deleting removes the header within 2s", func(t *testing.T) {
		start := time.Now()
		s.mustAPI(http.StatusNoContent, "DELETE", "/v1/experiments/checkout", nil, nil)
		harness.MustEventually(t, 2*time.Second, func() error {
			for i := range 50 {
				r, err := p.get(map[string][]string{"x-user-id": {fmt.Sprintf("del-%d", i)}, "x-experiment-checkout": {"forged"}})
				if err != nil {
					return err
				}
				if v := r.Header("x-experiment-checkout"); len(v) != 0 {
					return fmt.Errorf("x-experiment-checkout still %q", v)
				}
			}
			return nil
		})
		t.Logf("delete visible after %v", time.Since(start).Round(time.Millisecond))
	})

}

// compile compiles def, an experiment as the admin API takes it, with the
// filter's own decoder (config.Parse), as a proxy would: the engine's
// assignment is the tests' oracle. The admin API's revision is left out.
func compile(t *testing.T, def map[string]any) *engine.Set {
	t.Helper()
	exp := maps.Clone(def)
	delete(exp, "revision")
	b, err := json.Marshal(map[string]any{"experiments": []any{exp}})
	if err != nil {
		t.Fatal(err)
	}
	_, set, err := config.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
