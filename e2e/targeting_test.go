//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// TestTargetingByService: an experiment targeted at svc-a (services:
// ["svc-a"]) is served by the Envoy of cluster svc-a and never by the Envoy
// of cluster svc-b, while an untargeted experiment reaches both. The admin
// API's evaluate previews exactly that.
func TestTargetingByService(t *testing.T) { forArtifacts(t, testTargetingByService) }

func testTargetingByService(t *testing.T, art artifact) {
	s := startSystemFor(t, art)
	a := s.startSidecar("sidecar-a", "svc-a")
	b := s.startSidecar("sidecar-b", "svc-b")

	for _, def := range []map[string]any{
		{"key": "targeted", "variations": []string{"off", "on"}, "weights": []float64{0, 1}, "services": []string{"svc-a"}},
		{"key": "everywhere", "variations": []string{"off", "on"}, "weights": []float64{0, 1}},
	} {
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", def, nil)
	}

	check := func(p *proxy, wantTargeted bool) func() error {
		return func() error {
			r, err := p.get(map[string][]string{"x-user-id": {"alice"}, "x-experiment-targeted": {"forged"}})
			if err != nil {
				return err
			}
			// The untargeted experiment proves this proxy has the new
			// configuration before the targeted one is judged.
			if v := r.Header("x-experiment-everywhere"); len(v) != 1 || v[0] != "on" {
				return fmt.Errorf("x-experiment-everywhere = %q, want [on]", v)
			}
			v := r.Header("x-experiment-targeted")
			switch {
			case wantTargeted && (len(v) != 1 || v[0] != "on"):
				return fmt.Errorf("x-experiment-targeted = %q, want [on]", v)
			case !wantTargeted && len(v) != 0:
				return fmt.Errorf("x-experiment-targeted = %q, want none", v)
			}
			return nil
		}
	}
	harness.MustEventually(t, 10*time.Second, check(a, true))
	harness.MustEventually(t, 10*time.Second, check(b, false))
	// Stays invisible: the svc-b proxy's configuration never carries it.
	for range 20 {
		if err := check(b, false)(); err != nil {
			t.Fatal(err)
		}
	}

	for _, tt := range []struct {
		service string
		want    []string
	}{{"svc-a", []string{"everywhere", "targeted"}}, {"svc-b", []string{"everywhere"}}} {
		var ev struct {
			Assignments []struct {
				Experiment string `json:"experiment"`
			} `json:"assignments"`
		}
		s.mustAPI(http.StatusOK, "POST", "/v1/evaluate", map[string]any{"service": tt.service, "attributes": map[string]any{"id": "alice"}}, &ev)
		var got []string
		for _, x := range ev.Assignments {
			got = append(got, x.Experiment)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("evaluate for %s = %q, want %q", tt.service, got, tt.want)
		}
	}
}
