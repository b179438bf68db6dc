//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestConsoleGuardrails: the console's experiment page shows an
// experiment's guardrails, its ramp at the step allotd reached and a
// rollback allotd recorded; Start is disabled while the rollback is not
// acknowledged, and "Acknowledge and start" restarts it, recording alice.
// The form offers guardrails and ramp as JSON, never the state. The state
// is written into allotd's bbolt file while allotd is stopped, through
// admin.Service.WriteState as the controller (not yet implemented) will.
func TestConsoleGuardrails(t *testing.T) {
	s := startSystem(t)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "guarded", "owner": "team-a", "services": []string{"shop"}, "variations": []string{"classic", "one-page"}, "observe": true,
		"guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01}, {"metric": "latencyP95", "maxRatio": 1.2, "minRequests": "5000"}},
		"ramp":       map[string]any{"steps": []map[string]any{{"coverage": 0.01, "minHold": "3600s"}, {"coverage": 0.05, "minHold": "86400s"}, {"coverage": 0.5}}},
	}, nil)

	// What allotd's controller will write: the ramp at its second step,
	// then a rollback that paused the experiment.
	s.allotd.MustTerminate(t)
	db, err := bolt.Open(s.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	svc := admin.NewService(db, nil)
	_, err = svc.WriteState(context.Background(), "guarded", 0, "allotd", func(x *experimentv1.Experiment) {
		c := 0.05
		x.Coverage = &c
		x.RampState = &experimentv1.RampState{Step: 1, StepStartTime: timestamppb.New(at)}
	})
	if err == nil {
		_, err = svc.WriteState(context.Background(), "guarded", 0, "allotd", func(x *experimentv1.Experiment) {
			x.Status = experiment.StatusPaused
			x.Rollback = &experimentv1.Rollback{Guardrail: 0, Metric: experiment.MetricErrorRate, Variation: 1, ControlValue: 0.002, TreatmentValue: 0.04,
				ControlRequests: 6000, TreatmentRequests: 5900, Statistic: 14.1, PValue: 1e-9, Time: timestamppb.New(at), Revision: 3, Applied: 2, Proxies: 2}
		})
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	s.startAllotd()

	br := startBrowser(t, s.adminURL)
	br.signIn(ownerToken, "alice · owner of team-a")
	br.open("#/experiments/guarded")
	br.waitFor("#guards", 10*time.Second)
	if n := br.count("#guards tr[id^=guardrail-]"); n != 2 {
		t.Errorf("%d guardrail rows, want 2", n)
	}
	for sel, want := range map[string]string{
		"#guardrail-0":  "errorRate",
		"#guardrail-1":  "at most ×1.2",
		"#ramp":         "at step 2 of 3",
		".ramp-current": "5% (hold 86400s)",
		"#rollback":     "guardrails[0] (errorRate): variation 1 0.04 against control 0 0.002",
	} {
		if got := br.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s shows %q, want %q in it", sel, got, want)
		}
	}
	br.waitText("#guardrail-1", "5,000", 5*time.Second)
	br.waitText("#rollback", "Not acknowledged", 5*time.Second)
	if off, why := br.disabled("#action-start"); !off || !strings.Contains(why, "acknowledge the rollback") {
		t.Errorf("Start while the rollback is pending: disabled %v (%q), want disabled naming the acknowledgement", off, why)
	}
	br.narrow("")

	br.click("#action-acknowledge")
	br.waitText("#outcome", "now running", 15*time.Second)
	br.waitText("#rollback", "Acknowledged by alice", 10*time.Second)
	if br.count("#action-acknowledge") != 0 {
		t.Error("the acknowledge button stays after the acknowledgement")
	}
	var got struct {
		Status   string `json:"status"`
		Rollback struct {
			AcknowledgedBy string `json:"acknowledgedBy"`
		} `json:"rollback"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/guarded", nil, &got)
	if got.Status != experiment.StatusRunning || got.Rollback.AcknowledgedBy != "alice" {
		t.Errorf("after the console's acknowledgement the API has %+v, want running, acknowledged by alice", got)
	}

	br.open("#/experiments/guarded/edit")
	br.waitFor("#f-rest", 10*time.Second)
	rest := br.eval(`document.querySelector('#f-rest').value`)
	if !strings.Contains(rest, `"guardrails"`) || !strings.Contains(rest, `"ramp"`) || strings.Contains(rest, "rollback") || strings.Contains(rest, "rampState") {
		t.Errorf("the form's other fields: %s\nwant guardrails and ramp, no rollback or rampState", rest)
	}
}
