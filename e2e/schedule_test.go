//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// TestScheduleStartsAndEnds: an experiment with startTime ≈ now+2s and
// endTime ≈ now+4s is pushed to Envoy at its start and withdrawn at its end
// by allotd's schedule timer alone — no write happens at either boundary.
func TestScheduleStartsAndEnds(t *testing.T) {
	s := startSystem(t)
	p := s.startSidecar("sidecar-1", "checkout-svc")
	harness.MustEventually(t, 10*time.Second, func() error {
		_, err := p.get(map[string][]string{"x-user-id": {"probe"}})
		return err
	})

	// Whole seconds: the boundaries are exactly what is stored and compared.
	start := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	end := start.Add(2 * time.Second)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key":        "scheduled",
		"variations": []string{"control", "treatment"},
		"weights":    []float64{0, 1}, // everyone gets treatment: the header's presence is the signal
		"startTime":  start.UTC().Format(time.RFC3339),
		"endTime":    end.UTC().Format(time.RFC3339),
	}, nil)

	header := func() ([]string, error) {
		r, err := p.get(map[string][]string{"x-user-id": {"alice"}})
		if err != nil {
			return nil, err
		}
		return r.Header("x-experiment-scheduled"), nil
	}

	// Before its start the experiment is stored but not served.
	if v, err := header(); err != nil {
		t.Fatal(err)
	} else if time.Now().Before(start) && len(v) != 0 {
		t.Fatalf("before the start time the upstream saw x-experiment-scheduled %q", v)
	}

	var appeared time.Time
	harness.MustEventually(t, time.Until(end), func() error {
		v, err := header()
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0] != "treatment" {
			return fmt.Errorf("x-experiment-scheduled = %q, want [treatment]", v)
		}
		appeared = time.Now()
		return nil
	})
	if appeared.Before(start) {
		t.Errorf("the experiment was served at %v, before its start %v", appeared.Format(time.StampMilli), start.Format(time.StampMilli))
	}
	t.Logf("served %v after its start time", appeared.Sub(start).Round(time.Millisecond))

	var gone time.Time
	harness.MustEventually(t, time.Until(end)+3*time.Second, func() error {
		v, err := header()
		if err != nil {
			return err
		}
		if len(v) != 0 {
			return fmt.Errorf("x-experiment-scheduled still %q", v)
		}
		gone = time.Now()
		return nil
	})
	if gone.Before(end) {
		t.Errorf("the experiment was withdrawn at %v, before its end %v", gone.Format(time.StampMilli), end.Format(time.StampMilli))
	}
	t.Logf("withdrawn %v after its end time", gone.Sub(end).Round(time.Millisecond))

	// Nothing was written at the boundaries: the history is the one create.
	var h struct {
		Changes []map[string]any `json:"changes"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/scheduled/history", nil, &h)
	if len(h.Changes) != 1 {
		t.Errorf("history has %d changes, want only the create", len(h.Changes))
	}
}
