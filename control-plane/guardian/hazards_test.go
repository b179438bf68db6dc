package guardian

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// laggard is a hand-written admin.Rollouts whose one proxy never applies
// anything: Wait lasts until its context ends.
type laggard struct{}

func (laggard) Mark() rollout.Mark { return rollout.Mark{Targets: rollout.Targets{"shop": "v1"}} }
func (laggard) Wait(ctx context.Context, _ rollout.Mark, _ int64) *adminv1.Rollout {
	<-ctx.Done()
	return &adminv1.Rollout{Counts: map[string]int32{"pending": 1}}
}
func (laggard) Status() *adminv1.Rollout {
	return &adminv1.Rollout{Counts: map[string]int32{"pending": 1}}
}

// TestRollbackWaitHoldsOtherExperiments: two experiments break their
// guardrails at the same check, and proxies that never apply: both are
// paused at once — a rollback's wait for its proxies (up to the guardian's
// wait) holds up no other experiment's check.
func TestRollbackWaitHoldsOtherExperiments(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{"checkout", "search"} {
		f.create(t, fmt.Sprintf(`{"key":%q,"variations":["control","treatment"],"observe":true,
			"guardrails":[{"metric":"errorRate","maxIncrease":0.01}]}`, key))
		f.report(t, key, [][3]uint64{{20000, 200, 20}, {20000, 800, 20}})
	}
	const wait = 6 * time.Second
	g, err := New(f.svc, f.agg, laggard{}, prometheus.NewRegistry(), WithClock(f.clock.Now), WithWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background()) }()
	err = harness.Eventually(context.Background(), 2*time.Second, func() error {
		for _, key := range []string{"checkout", "search"} {
			if e := f.get(t, key); experiment.Status(e) != experiment.StatusPaused {
				return fmt.Errorf("%s still %s while the other rollback waits for its proxies", key, experiment.Status(e))
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("both experiments breached at one check, not both rolled back within 2 s: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// staleReports is a hand-written Reports whose report is of an earlier
// assignment revision of the experiment (the aggregator answers with the
// experiments it read last when another caller is reading the store, or
// for refreshBackoff after a failed read), with its breached guardrail.
type staleReports struct{}

func (staleReports) Report(_ context.Context, key string, _ int) (*adminv1.Outcomes, error) {
	return &adminv1.Outcomes{Experiment: key, Revision: "0123456789abcdef",
		Total: []*adminv1.VariationOutcomes{{Variation: 0, Requests: 20000}, {Variation: 1, Requests: 20000}},
		Guardrails: []*adminv1.GuardrailStatus{{Guardrail: 0, Metric: experiment.MetricErrorRate, Control: 0, Variation: 1,
			Evaluated: true, Breached: true, PValue: 1e-9, ControlValue: 0.01, TreatmentValue: 0.04}}}, nil
}

// TestRollbackNeedsTheCurrentRevision: a report of another assignment
// revision than the experiment the guardian listed (one the owner just
// replaced) is no evidence about it: no rollback.
func TestRollbackNeedsTheCurrentRevision(t *testing.T) {
	f := newFixture(t)
	f.create(t, guarded)
	g, err := New(f.svc, staleReports{}, nil, prometheus.NewRegistry(), WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); experiment.Status(e) != experiment.StatusRunning {
		t.Errorf("rolled back (status %s, rollback %v) on a report of revision 0123456789abcdef, not the experiment's", experiment.Status(e), e.GetRollback())
	}
}

// unknownRollout is a hand-written admin.Rollouts whose status could not
// be read (rollout.Mesh.Status when the registry read fails: a rollout
// with an error and no proxy listed).
type unknownRollout struct{}

func (unknownRollout) Mark() rollout.Mark { return rollout.Mark{} }
func (unknownRollout) Wait(context.Context, rollout.Mark, int64) *adminv1.Rollout {
	return rollout.Failed(errors.New("read the mesh registry: context deadline exceeded"))
}
func (unknownRollout) Status() *adminv1.Rollout {
	return rollout.Failed(errors.New("read the mesh registry: context deadline exceeded"))
}

// TestRampNeedsAKnownRollout: while the mesh's rollout status cannot be
// read, where the proxies stand is unknown and the ramp does not move.
func TestRampNeedsAKnownRollout(t *testing.T) {
	f := newFixture(t)
	g, err := New(f.svc, f.agg, unknownRollout{}, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if step := f.rampOfShop(t, g); step != 0 {
		t.Errorf("ramp at step %d while the rollout status is %q, want step 0", step, unknownRollout{}.Status().GetError())
	}
}

// TestAcknowledgedRestartStartsOver: an owner acknowledges a rollback and
// starts the experiment again; the figures from before the rollback are no
// evidence about it (the rollback starts a new outcomes revision), so the
// next check does not roll it back again on them.
func TestAcknowledgedRestartStartsOver(t *testing.T) {
	f := newFixture(t)
	f.create(t, guarded)
	f.report(t, "checkout", [][3]uint64{{20000, 200, 20}, {20000, 800, 20}})
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); experiment.Status(e) != experiment.StatusPaused {
		t.Fatalf("status %s after the breach, want paused", experiment.Status(e))
	}
	if _, err := f.svc.StartAcknowledgingRollback(context.Background(), owner, "checkout", 0); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(10 * time.Second)
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); experiment.Status(e) != experiment.StatusRunning {
		t.Errorf("acknowledged and started, then %s again by the next check with no request served since (rollback %v)", experiment.Status(e), e.GetRollback())
	}
}

// TestAcceptedGuardrailIsEvaluated: every guardrail the API accepts is
// evaluated — maxIncrease 1, the bound, included — so that a healthy
// treatment's ramp moves on.
func TestAcceptedGuardrailIsEvaluated(t *testing.T) {
	f := newFixture(t)
	f.create(t, `{"key":"checkout","variations":["control","treatment"],"observe":true,
		"guardrails":[{"metric":"errorRate","maxIncrease":1}],
		"ramp":{"steps":[{"coverage":0.01},{"coverage":0.5}]}}`)
	for range 3 {
		f.report(t, "checkout", [][3]uint64{{5000, 50, 20}, {5000, 50, 20}})
		f.clock.Add(time.Minute)
		if err := f.g.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := f.agg.Report(context.Background(), "checkout", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); e.GetRampState().GetStep() != 1 {
		t.Errorf("ramp at step %d with a healthy treatment and a guardrail the API accepted, want 1; its status: %v", e.GetRampState().GetStep(), rep.GetGuardrails())
	}
}
