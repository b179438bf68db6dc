package guardian

import (
	"context"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// fixture is the admin API and the outcomes of a real bbolt store, and a
// guardian over them (no proxies tracked).
type fixture struct {
	svc   *admin.Service
	agg   *outcomes.Aggregator
	g     *Guardian
	clock *harness.Clock
}

var owner = &admin.Principal{Name: "alice", Role: admin.RoleAdmin}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{clock: harness.NewClock(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))}
	f.svc = admin.NewService(db, nil, admin.WithClock(f.clock.Now))
	if f.agg, err = outcomes.New(t.Context(), db, experiment.FromStore, nil, outcomes.WithClock(f.clock.Now)); err != nil {
		t.Fatal(err)
	}
	f.g = f.guardian(t)
	return f
}

func (f *fixture) guardian(t *testing.T) *Guardian {
	g, err := New(f.svc, f.agg, nil, prometheus.NewRegistry(), WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (f *fixture) create(t *testing.T, doc string) *experimentv1.Experiment {
	t.Helper()
	e := &experimentv1.Experiment{}
	if err := protojson.Unmarshal([]byte(doc), e); err != nil {
		t.Fatal(err)
	}
	out, err := f.svc.Create(context.Background(), owner, e)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) get(t *testing.T, key string) *experimentv1.Experiment {
	t.Helper()
	e, err := f.svc.Get(context.Background(), owner, key)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// report feeds the aggregator one export of a proxy running key's current
// assignment revision: per variation, its requests and errors, all timed
// at ms.
func (f *fixture) report(t *testing.T, key string, perVariation [][3]uint64) {
	t.Helper()
	rev := f.get(t, key).GetAssignmentRevision()
	var ms []*metricsv1.Metric
	for v, c := range perVariation {
		requests, errors, at := c[0], c[1], float64(c[2])
		for class, n := range map[int]uint64{wire.Class2xx: requests - errors, wire.Class5xx: errors} {
			ms = append(ms, &metricsv1.Metric{Name: wire.StatName(wire.OutcomeMetric(key, rev, v, class)),
				Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{IsMonotonic: true,
					AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
					DataPoints:             []*metricsv1.NumberDataPoint{{Value: &metricsv1.NumberDataPoint_AsInt{AsInt: int64(n)}}}}}})
		}
		buckets := make([]uint64, len(wire.LatencyBounds)+1)
		i := 0
		for i < len(wire.LatencyBounds) && wire.LatencyBounds[i] < at {
			i++
		}
		buckets[i] = requests
		ms = append(ms, &metricsv1.Metric{Name: wire.StatName(wire.OutcomeMetric(key, rev, v, wire.Latency)),
			Data: &metricsv1.Metric_Histogram{Histogram: &metricsv1.Histogram{
				AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
				DataPoints:             []*metricsv1.HistogramDataPoint{{Count: requests, ExplicitBounds: wire.LatencyBounds, BucketCounts: buckets}}}}})
	}
	f.agg.Add(context.Background(), "p1", "", ms)
}

// guarded is an observed experiment whose treatment may raise the error
// rate by at most one percentage point.
const guarded = `{"key":"checkout","variations":["control","treatment"],"observe":true,
	"guardrails":[{"metric":"errorRate","maxIncrease":0.01}]}`

// rollbacks counts the experiment's writes by the guardian that paused it.
func rollbacks(t *testing.T, f *fixture, key string) int {
	t.Helper()
	changes, err := f.svc.History(context.Background(), owner, key)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range changes {
		if c.GetActor() == Actor && c.GetOp() == "update" && experiment.Status(c.GetAfter()) == experiment.StatusPaused &&
			experiment.Status(c.GetBefore()) == experiment.StatusRunning {
			n++
		}
	}
	return n
}

// TestRollbackOnBreach: a treatment whose error rate is 3 points above the
// control's breaks the guardrail: the guardian pauses the experiment with a
// rollback record naming the guardrail, the variation and the figures, in
// one audited write; a further check writes nothing.
func TestRollbackOnBreach(t *testing.T) {
	f := newFixture(t)
	f.create(t, guarded)
	f.report(t, "checkout", [][3]uint64{{20000, 200, 20}, {20000, 800, 20}})
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.g.waits.Wait() // the record of the proxies
	e := f.get(t, "checkout")
	rb := e.GetRollback()
	if experiment.Status(e) != experiment.StatusPaused || rb == nil {
		t.Fatalf("after the check: status %s, rollback %v", experiment.Status(e), rb)
	}
	if rb.GetGuardrail() != 0 || rb.GetVariation() != 1 || rb.GetMetric() != experiment.MetricErrorRate ||
		rb.GetControlValue() != 0.01 || rb.GetTreatmentValue() != 0.04 || rb.GetTreatmentRequests() != 20000 ||
		rb.GetPValue() > 0.05 || rb.GetTime() == nil || rb.GetRevision() == 0 || rb.GetAppliedTime() == nil {
		t.Errorf("rollback %v", rb)
	}
	// The evidence is revision 1's; the pause is revision 2, whose report
	// keeps revision 1's tests among the earlier revisions.
	if rb.GetAssignmentRevision() != 1 || e.GetAssignmentRevision() != 2 {
		t.Errorf("rollback of assignment revision %d, experiment at %d; want 1, 2", rb.GetAssignmentRevision(), e.GetAssignmentRevision())
	}
	rep, err := f.agg.Report(context.Background(), "checkout", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ea := rep.GetEarlier(); len(ea) != 1 || ea[0].GetRevision() != "1" || len(ea[0].GetGuardrails()) != 1 || !ea[0].GetGuardrails()[0].GetBreached() {
		t.Errorf("earlier revisions %v, want revision 1 with its breached test", ea)
	}
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rollbacks(t, f, "checkout"); n != 1 {
		t.Errorf("%d rollback writes, want 1", n)
	}
}

// TestHealthyTreatmentKept: a treatment with the control's error rate and
// latency is not rolled back, however often it is checked.
func TestHealthyTreatmentKept(t *testing.T) {
	f := newFixture(t)
	f.create(t, `{"key":"checkout","variations":["control","treatment"],"observe":true,
		"guardrails":[{"metric":"errorRate","maxIncrease":0.01},{"metric":"latencyP95","maxRatio":1.2}]}`)
	for range 20 {
		f.report(t, "checkout", [][3]uint64{{1000, 10, 20}, {1000, 10, 20}})
		if err := f.g.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if e := f.get(t, "checkout"); experiment.Status(e) != experiment.StatusRunning || e.GetRollback() != nil {
		t.Errorf("status %s, rollback %v", experiment.Status(e), e.GetRollback())
	}
}

// TestOneRollbackOfMany: guardians deciding the same rollback at once (the
// replicas of one store) write it once: the write is a compare-and-swap.
func TestOneRollbackOfMany(t *testing.T) {
	f := newFixture(t)
	f.create(t, guarded)
	f.report(t, "checkout", [][3]uint64{{20000, 200, 20}, {20000, 800, 20}})
	var wg sync.WaitGroup
	for range 4 {
		g := f.guardian(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Check(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := rollbacks(t, f, "checkout"); n != 1 {
		t.Errorf("%d rollback writes, want exactly 1", n)
	}
}

// TestRampAdvances: a ramp starts at its first step and moves to the next
// once the step was held its min_hold and every guardrail holds, each
// step one audited write; the last step is kept.
func TestRampAdvances(t *testing.T) {
	f := newFixture(t)
	f.create(t, `{"key":"checkout","variations":["control","treatment"],"observe":true,
		"guardrails":[{"metric":"errorRate","maxIncrease":0.01,"minRequests":100}],
		"ramp":{"steps":[{"coverage":0.01},{"coverage":0.05,"minHold":"60s"},{"coverage":0.25}]}}`)
	check := func(wantStep int32, wantCoverage float64) {
		t.Helper()
		if err := f.g.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		e := f.get(t, "checkout")
		if e.GetRampState().GetStep() != wantStep || e.GetCoverage() != wantCoverage {
			t.Fatalf("step %d coverage %v, want %d, %v", e.GetRampState().GetStep(), e.GetCoverage(), wantStep, wantCoverage)
		}
	}
	check(0, 0.01) // started
	check(0, 0.01) // the guardrail has no counts yet: not holding
	f.report(t, "checkout", [][3]uint64{{200, 2, 20}, {200, 2, 20}})
	check(1, 0.05)
	f.report(t, "checkout", [][3]uint64{{200, 2, 20}, {200, 2, 20}}) // the new step is a new revision: counts start over
	f.clock.Add(59 * time.Second)
	check(1, 0.05) // held 59 s of 60
	f.clock.Add(time.Second)
	check(2, 0.25)
	f.clock.Add(time.Hour)
	f.report(t, "checkout", [][3]uint64{{200, 2, 20}, {200, 2, 20}})
	check(2, 0.25) // the last step
	changes, err := f.svc.History(context.Background(), owner, "checkout")
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, c := range changes {
		if c.GetActor() == Actor {
			steps++
		}
	}
	if steps != 3 {
		t.Errorf("%d writes by %s, want 3 (start and two steps)", steps, Actor)
	}
}

// TestPausedRampWaits: a paused experiment's ramp does not move, and a
// start holds the current step from then on: time paused never counts
// towards its minHold.
func TestPausedRampWaits(t *testing.T) {
	f := newFixture(t)
	f.create(t, `{"key":"checkout","variations":["control","treatment"],
		"ramp":{"steps":[{"coverage":0.01,"minHold":"60s"},{"coverage":0.5}]}}`)
	check := func(wantStep int32) {
		t.Helper()
		if err := f.g.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if e := f.get(t, "checkout"); e.GetRampState().GetStep() != wantStep {
			t.Fatalf("step %d coverage %v, want step %d", e.GetRampState().GetStep(), e.GetCoverage(), wantStep)
		}
	}
	check(0)
	if _, err := f.svc.Pause(context.Background(), owner, "checkout", 0); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Hour)
	check(0) // paused
	if _, err := f.svc.Start(context.Background(), owner, "checkout", 0); err != nil {
		t.Fatal(err)
	}
	check(0) // held 0 s since the start
	f.clock.Add(time.Minute)
	check(1)
}

// rampOfShop creates experiment checkout of service shop with a ramp of
// two steps and no hold, has g check it three times a minute apart, and
// returns the ramp's step.
func (f *fixture) rampOfShop(t *testing.T, g *Guardian) int32 {
	t.Helper()
	f.create(t, `{"key":"checkout","variations":["control","treatment"],"services":["shop"],
		"ramp":{"steps":[{"coverage":0.01},{"coverage":0.5}]}}`)
	for range 3 {
		f.clock.Add(time.Minute)
		if err := g.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return f.get(t, "checkout").GetRampState().GetStep()
}

// proxies is a hand-written admin.Rollouts: its proxy of cluster shop is
// in state, and a waited write finds both proxies applied.
type proxies struct{ state string }

func (p *proxies) Mark() rollout.Mark { return rollout.Mark{} }
func (p *proxies) Wait(context.Context, rollout.Mark, int64) *adminv1.Rollout {
	return &adminv1.Rollout{Result: "applied", Counts: map[string]int32{"applied": 2}}
}
func (p *proxies) Status() *adminv1.Rollout {
	return &adminv1.Rollout{Proxies: []*adminv1.ProxyStatus{{NodeId: "p1", Cluster: "shop", State: p.state}}}
}

// TestRampWaitsForProxies: a ramp step is not taken while a proxy the
// experiment applies to has not applied the current configuration; a
// rollback records how many proxies applied it.
func TestRampWaitsForProxies(t *testing.T) {
	f := newFixture(t)
	ro := &proxies{state: "pending"}
	g, err := New(f.svc, f.agg, ro, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if step := f.rampOfShop(t, g); step != 0 {
		t.Fatalf("step %d with a proxy pending, want 0", step)
	}
	if v := testutil.ToFloat64(g.waiting.WithLabelValues("checkout", waitProxies)); v != 1 {
		t.Errorf(`allot_ramp_waiting{reason="proxies"} = %v while a proxy is pending, want 1`, v)
	}
	ro.state = "applied"
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); e.GetRampState().GetStep() != 1 || e.GetCoverage() != 0.5 {
		t.Errorf("step %d coverage %v once applied, want 1, 0.5", e.GetRampState().GetStep(), e.GetCoverage())
	}

	// A rollback waits for the proxies and records what the wait found.
	f = newFixture(t)
	if g, err = New(f.svc, f.agg, ro, nil, WithClock(f.clock.Now)); err != nil {
		t.Fatal(err)
	}
	f.create(t, guarded)
	f.report(t, "checkout", [][3]uint64{{20000, 200, 20}, {20000, 800, 20}})
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.waits.Wait()
	if rb := f.get(t, "checkout").GetRollback(); rb.GetApplied() != 2 || rb.GetProxies() != 2 {
		t.Errorf("rollback applied by %d of %d, want 2 of 2", rb.GetApplied(), rb.GetProxies())
	}
}

// TestActorName: the guardian's actor follows the rule every caller's name
// follows (experiment.ActorNamePattern, a token's name included).
func TestActorName(t *testing.T) {
	if p := experiment.ActorNameProblem(Actor); p != "" {
		t.Errorf("Actor %q: %s", Actor, p)
	}
}

// TestRampWithZeroWeightVariationAdvances: a variation of weight 0 gets
// no requests, so its guardrail could never be evaluated; guardrails skip
// it, and the ramp moves on the served treatment's evidence alone.
func TestRampWithZeroWeightVariationAdvances(t *testing.T) {
	f := newFixture(t)
	f.create(t, `{"key":"checkout","variations":["control","treatment","retired"],"weights":[0.5,0.5,0],"observe":true,
		"guardrails":[{"metric":"errorRate","maxIncrease":0.01,"minRequests":100}],
		"ramp":{"steps":[{"coverage":0.01},{"coverage":0.05}]}}`)
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.report(t, "checkout", [][3]uint64{{200, 2, 20}, {200, 2, 20}, {0, 0, 20}})
	rep, err := f.agg.Report(context.Background(), "checkout", 1)
	if err != nil {
		t.Fatal(err)
	}
	if gs := rep.GetGuardrails(); len(gs) != 1 || gs[0].GetVariation() != 1 || !gs[0].GetEvaluated() {
		t.Errorf("guardrail statuses %v, want variation 1's alone, evaluated", gs)
	}
	if err := f.g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, "checkout"); e.GetRampState().GetStep() != 1 || e.GetCoverage() != 0.05 {
		t.Errorf("step %d coverage %v with the served treatment holding, want 1, 0.05", e.GetRampState().GetStep(), e.GetCoverage())
	}
	if v := testutil.ToFloat64(f.g.waiting.WithLabelValues("checkout", waitGuardrails)); v != 0 {
		t.Errorf(`allot_ramp_waiting{reason="guardrails"} = %v, want 0`, v)
	}
}

// TestDefaultWaitIsAdminMaxWait: a rollback waits for its proxies as long
// as the admin API lets a write wait.
func TestDefaultWaitIsAdminMaxWait(t *testing.T) {
	if DefaultWait != admin.MaxWait {
		t.Fatalf("DefaultWait = %v, admin.MaxWait = %v", DefaultWait, admin.MaxWait)
	}
}
