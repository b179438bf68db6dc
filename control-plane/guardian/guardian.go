// Package guardian acts on the guardrails and ramps of running experiments:
// it reads each one's mesh-wide outcomes and the sequential test of every
// guardrail (control-plane/outcomes, control-plane/guard), rolls back a
// treatment that breaks a guardrail — pausing the experiment with a
// Rollback record through the admin API's write path, then waiting until
// every proxy applied the pause and recording how many did — and moves a
// ramp to its next step once the step was held long enough, every
// guardrail holds and every proxy applied the step.
//
// Every allotd replica runs a Guardian. Each write is a compare-and-swap on
// the store revision it was decided on, so when several replicas decide the
// same rollback or step, exactly one writes it and the others find a
// conflict and do nothing.
//
// It reaches the admin API, the outcomes and the proxies only through its
// own interfaces (Experiments, Reports, Rollouts), which admin.Service,
// outcomes.Aggregator and rollout.Local or rollout.Mesh satisfy in allotd's
// wiring (control-plane/server); it imports experiment, outcomes (for
// Revision), rollout (the proxy states) and store (its conflict error).
package guardian

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Actor is the name a guardian's writes carry in the history.
const Actor = "allotd:guardian"

// DefaultInterval is how often a guardian checks (-guardian-interval).
const DefaultInterval = 10 * time.Second

// Reasons of allot_ramp_waiting.
const (
	waitHold       = "hold"
	waitGuardrails = "guardrails"
	waitProxies    = "proxies"
)

// DefaultWait bounds how long a rollback waits for the proxies before it
// records how many applied it: the admin API's longest wait (admin.MaxWait;
// a test holds them equal).
const DefaultWait = 60 * time.Second

// Experiments is what a guardian needs of the admin API (admin.Service):
// the running experiments read with allotd's own authority, and allotd's
// own write of its state.
type Experiments interface {
	Running(ctx context.Context) ([]*experimentv1.Experiment, error)
	WriteState(ctx context.Context, key string, revision int64, actor string, set func(*experimentv1.Experiment)) (*experimentv1.Experiment, error)
}

// Rollouts is what a guardian needs of where the proxies stand
// (admin.Rollouts: allotd passes rollout.Local or rollout.Mesh).
type Rollouts interface {
	// Mark returns the version each cluster's proxies should run before a
	// write, with the store revision they are as of (rollout.Mark).
	Mark() rollout.Mark
	// Wait waits until every connected proxy of a cluster whose version
	// changed since mark has applied or rejected it, or ctx ends; rev is
	// the store revision of the write.
	Wait(ctx context.Context, mark rollout.Mark, rev int64) *adminv1.Rollout
	// Status reports every connected proxy against its cluster's current
	// version.
	Status() *adminv1.Rollout
}

// Reports gives an observed experiment's outcomes with its guardrails'
// tests (outcomes.Aggregator.Report).
type Reports interface {
	Report(ctx context.Context, key string, minutes int) (*adminv1.Outcomes, error)
}

// Guardian checks guardrails and advances ramps; New, then Run.
type Guardian struct {
	exps     Experiments
	reports  Reports
	rollouts Rollouts
	log      *slog.Logger
	now      func() time.Time
	interval time.Duration
	wait     time.Duration

	breached  *prometheus.GaugeVec
	pValue    *prometheus.GaugeVec
	step      *prometheus.GaugeVec
	rollbacks *prometheus.CounterVec
	steps     *prometheus.CounterVec
	checks    prometheus.Counter
	waiting   *prometheus.GaugeVec

	waits sync.WaitGroup // rollbacks waiting for their proxies (record)
}

// Option configures a Guardian.
type Option func(*Guardian)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(g *Guardian) { g.log = l } }

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(g *Guardian) { g.now = now } }

// WithInterval sets how often Run checks (default DefaultInterval).
func WithInterval(d time.Duration) Option { return func(g *Guardian) { g.interval = d } }

// WithWait sets how long a rollback waits for the proxies (default
// DefaultWait).
func WithWait(d time.Duration) Option { return func(g *Guardian) { g.wait = d } }

// New returns a Guardian over exps, reports and rollouts (nil: rollbacks
// record no proxies, ramps never wait for them), registering its metrics
// with reg.
func New(exps Experiments, reports Reports, rollouts Rollouts, reg prometheus.Registerer, opts ...Option) (*Guardian, error) {
	g := &Guardian{exps: exps, reports: reports, rollouts: rollouts, now: time.Now, interval: DefaultInterval, wait: DefaultWait,
		breached: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_guardrail_breached",
			Help: "1 when the guardrail's sequential test says the treatment breaks it, 0 while it holds, -1 while its counts are under the minimum; per running experiment, guardrail index and treatment variation, at the last check."},
			[]string{"experiment", "guardrail", "variation"}),
		pValue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_guardrail_p_value",
			Help: "The guardrail's always-valid p-value at the last check, per running experiment, guardrail index and treatment variation."},
			[]string{"experiment", "guardrail", "variation"}),
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_ramp_step",
			Help: "The index of the current ramp step of each running experiment with a ramp."}, []string{"experiment"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_guardrail_rollbacks_total",
			Help: "Rollbacks this replica wrote, by experiment."}, []string{"experiment"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_ramp_steps_total",
			Help: "Ramp steps this replica wrote, by experiment."}, []string{"experiment"}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_guardian_checks_total",
			Help: "Checks of every running experiment's guardrails and ramp this replica completed."}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_ramp_waiting",
			Help: "1 for what keeps a running experiment's ramp at its step at the last check: hold (its minHold not over), guardrails (one not evaluated yet, too few requests), proxies (one the experiment applies to has not applied the current configuration, or where they stand is unknown)."},
			[]string{"experiment", "reason"}),
	}
	for _, o := range opts {
		o(g)
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{g.breached, g.pValue, g.step, g.rollbacks, g.steps, g.checks, g.waiting} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

// Run checks every interval until ctx ends, then waits for the rollbacks
// still waiting for their proxies (which end with ctx).
func (g *Guardian) Run(ctx context.Context) {
	defer g.waits.Wait()
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.Check(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("guardian: check", "error", err)
		}
	}
}

// Check checks every running experiment with guardrails or a ramp once.
func (g *Guardian) Check(ctx context.Context) error {
	list, err := g.exps.Running(ctx)
	if err != nil {
		return err
	}
	g.breached.Reset()
	g.pValue.Reset()
	g.step.Reset()
	g.waiting.Reset()
	now := g.now()
	// Where the proxies stand is read once a check, by the first ramp that
	// asks (with replicas it is a read of the mesh registry).
	var st *adminv1.Rollout
	status := func() *adminv1.Rollout {
		if st == nil {
			st = g.rollouts.Status()
		}
		return st
	}
	var errs []error
	for _, e := range list {
		if (len(e.GetGuardrails()) == 0 && e.GetRamp() == nil) || !experiment.Running(e, now) {
			continue
		}
		if err := g.one(ctx, e, now, status); err != nil {
			errs = append(errs, err)
		}
	}
	g.checks.Inc()
	return errors.Join(errs...)
}

// one checks e, a running experiment with guardrails or a ramp; status is
// the rollout status of this check.
func (g *Guardian) one(ctx context.Context, e *experimentv1.Experiment, now time.Time, status func() *adminv1.Rollout) error {
	holding := true // every guardrail evaluated for every treatment, none breached
	if len(e.GetGuardrails()) > 0 {
		rep, err := g.reports.Report(ctx, e.GetKey(), 1)
		if err != nil {
			return err
		}
		if rep.GetRevision() != outcomes.Revision(e) {
			// Figures of another assignment revision (the report read the
			// experiments before the write this check read): none of them
			// is evidence about this one. The next check decides.
			return nil
		}
		for _, st := range rep.GetGuardrails() {
			labels := []string{e.GetKey(), itoa(st.GetGuardrail()), itoa(st.GetVariation())}
			switch {
			case st.GetBreached():
				g.breached.WithLabelValues(labels...).Set(1)
			case st.GetEvaluated():
				g.breached.WithLabelValues(labels...).Set(0)
			default:
				g.breached.WithLabelValues(labels...).Set(-1)
				holding = false
			}
			g.pValue.WithLabelValues(labels...).Set(st.GetPValue())
		}
		for _, st := range rep.GetGuardrails() {
			if st.GetBreached() {
				return g.rollback(ctx, e, rep, st, now)
			}
		}
	}
	if e.GetRamp() != nil {
		g.step.WithLabelValues(e.GetKey()).Set(float64(e.GetRampState().GetStep()))
		return g.advance(ctx, e, holding, now, status)
	}
	return nil
}

// rollback pauses e with a Rollback record of st, waits for the proxies and
// records how many applied the pause. Another writer first (a replica that
// rolled it back, an owner's change) makes it do nothing.
func (g *Guardian) rollback(ctx context.Context, e *experimentv1.Experiment, rep *adminv1.Outcomes, st *adminv1.GuardrailStatus, now time.Time) error {
	var mark rollout.Mark
	if g.rollouts != nil {
		mark = g.rollouts.Mark()
	}
	total := rep.GetTotal()
	rb := &experimentv1.Rollback{Guardrail: st.GetGuardrail(), Metric: st.GetMetric(), Control: st.GetControl(), Variation: st.GetVariation(),
		ControlValue: st.GetControlValue(), TreatmentValue: st.GetTreatmentValue(), Statistic: st.GetStatistic(), PValue: st.GetPValue(),
		Time: timestamppb.New(now), AssignmentRevision: e.GetAssignmentRevision()}
	// The requests the test counted: those answered (aborted ones are no
	// evidence).
	if c := int(st.GetControl()); c < len(total) {
		rb.ControlRequests = total[c].GetRequests() - total[c].GetAborted()
	}
	if v := int(st.GetVariation()); v < len(total) {
		rb.TreatmentRequests = total[v].GetRequests() - total[v].GetAborted()
	}
	rolled, err := g.exps.WriteState(ctx, e.GetKey(), e.GetRevision(), Actor, func(x *experimentv1.Experiment) {
		x.Status = experiment.StatusPaused
		x.Rollback = rb
	})
	if errors.Is(err, store.ErrConflict) {
		return nil // written meanwhile: the next check reads it
	}
	if err != nil {
		return err
	}
	g.rollbacks.WithLabelValues(e.GetKey()).Inc()
	g.log.Warn("guardrail broken: experiment rolled back", "experiment", e.GetKey(), "guardrail", st.GetGuardrail(), "metric", st.GetMetric(),
		"variation", st.GetVariation(), "control_value", st.GetControlValue(), "treatment_value", st.GetTreatmentValue(),
		"p_value", st.GetPValue(), "revision", rolled.GetRevision())
	rb = proto.Clone(rb).(*experimentv1.Rollback)
	rb.Revision = rolled.GetRevision()
	// The wait for the proxies runs on its own, so that it holds up no
	// other experiment's check; Run waits for it before returning.
	g.waits.Go(func() { g.record(ctx, e.GetKey(), rb, mark) })
	return nil
}

// record waits until every proxy the rollback write concerned applied it
// (at most the guardian's wait) and records how many did on that write,
// unless it was changed since (an owner acknowledged it and started again:
// the record is theirs).
func (g *Guardian) record(ctx context.Context, key string, rb *experimentv1.Rollback, mark rollout.Mark) {
	if g.rollouts != nil {
		wctx, cancel := context.WithTimeout(ctx, g.wait)
		ro := g.rollouts.Wait(wctx, mark, rb.GetRevision())
		cancel()
		rb.Applied, rb.Proxies = applied(ro)
	}
	rb.AppliedTime = timestamppb.New(g.now())
	_, err := g.exps.WriteState(ctx, key, rb.GetRevision(), Actor, func(x *experimentv1.Experiment) {
		x.Rollback = rb
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		g.log.Info("guardian: rollback changed before its proxies were counted", "experiment", key)
	case err != nil:
		g.log.Warn("guardian: rollback's proxies not recorded", "experiment", key, "error", err)
	default:
		g.log.Warn("rollback applied", "experiment", key, "applied", rb.GetApplied(), "proxies", rb.GetProxies())
	}
}

// advance starts e's ramp or moves it to its next step: once the step was
// held its min_hold, every guardrail holds (holding) and every proxy e
// applies to runs the current configuration.
func (g *Guardian) advance(ctx context.Context, e *experimentv1.Experiment, holding bool, now time.Time, status func() *adminv1.Rollout) error {
	steps := e.GetRamp().GetSteps()
	if len(steps) == 0 {
		return nil
	}
	st := e.GetRampState()
	next := 0
	if st != nil {
		cur := int(st.GetStep())
		if cur >= len(steps)-1 {
			return nil
		}
		held := st.GetStepStartTime().AsTime()
		if start := e.GetStartTime(); start != nil && start.AsTime().After(held) {
			held = start.AsTime() // the schedule's start: time before it never counts
		}
		switch {
		case now.Sub(held) < steps[cur].GetMinHold().AsDuration():
			g.waiting.WithLabelValues(e.GetKey(), waitHold).Set(1)
			return nil
		case !holding:
			g.waiting.WithLabelValues(e.GetKey(), waitGuardrails).Set(1)
			return nil
		case !g.appliedEverywhere(e, status):
			g.waiting.WithLabelValues(e.GetKey(), waitProxies).Set(1)
			return nil
		}
		next = cur + 1
	}
	written, err := g.exps.WriteState(ctx, e.GetKey(), e.GetRevision(), Actor, func(x *experimentv1.Experiment) {
		x.Coverage = ptr(steps[next].GetCoverage())
		x.RampState = &experimentv1.RampState{Step: int32(next), StepStartTime: timestamppb.New(now)}
	})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	g.steps.WithLabelValues(e.GetKey()).Inc()
	g.log.Info("ramp step", "experiment", e.GetKey(), "step", next, "coverage", steps[next].GetCoverage(), "revision", written.GetRevision())
	return nil
}

// appliedEverywhere reports whether every proxy e applies to has applied
// its cluster's current configuration (with no rollouts tracked: true).
func (g *Guardian) appliedEverywhere(e *experimentv1.Experiment, status func() *adminv1.Rollout) bool {
	if g.rollouts == nil {
		return true
	}
	st := status()
	if st.GetResult() == rollout.ResultError {
		return false // where the proxies stand is unknown: wait
	}
	for _, p := range st.GetProxies() {
		if experiment.AppliesTo(e, p.GetCluster()) && p.GetState() != string(rollout.StateApplied) {
			return false
		}
	}
	return true
}

// applied counts a waited rollout's applied proxies and all its proxies.
func applied(ro *adminv1.Rollout) (n, all int32) {
	for state, c := range ro.GetCounts() {
		all += int32(c)
		if state == string(rollout.StateApplied) {
			n += int32(c)
		}
	}
	return n, all
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func ptr[T any](v T) *T { return &v }
