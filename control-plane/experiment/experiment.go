// Package experiment holds what is true of one experiment document, with no
// I/O: its lifecycle (the statuses, the transitions between them, whether
// it runs at a time, which services it applies to), the forms it is kept
// and served in (Spec, Definition), the bounds of the document and its
// fields (CheckBounds, CheckFields, guardrails and ramp included) and the
// state allotd keeps in it (ClearState, CopyState, Acknowledge,
// FillRampCoverage). translate, admin and allotctl all
// decide these questions here; the console's transition table is checked
// against Transitions by a test.
//
// It imports only the standard library, the proto packages, the filter's
// engine (to render a variation as the filter does) and, of the control
// plane, guard (the guardrail metrics) and store (the stored document
// FromStore decodes); every other control-plane package may import it.
package experiment

import (
	"fmt"
	"github.com/allotmesh/allot/control-plane/guard"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Experiment statuses: only running experiments reach the proxies.
const (
	StatusDraft   = "draft"
	StatusRunning = "running"
	StatusPaused  = "paused"
	StatusStopped = "stopped"
)

// Transitions lists the statuses each status may move to; its keys are
// every status there is.
var Transitions = map[string][]string{
	StatusDraft:   {StatusRunning, StatusStopped},
	StatusRunning: {StatusPaused, StatusStopped},
	StatusPaused:  {StatusRunning, StatusStopped},
	StatusStopped: nil,
}

// TransitionsHelp states Transitions for error messages.
const TransitionsHelp = "allowed: draft → running|stopped, running → paused|stopped, paused → running|stopped; stopped is final"

// KnownStatus reports whether st is a status (the empty default excluded).
func KnownStatus(st string) bool {
	_, ok := Transitions[st]
	return ok
}

// Allowed reports whether an experiment may move from status from to
// status to.
func Allowed(from, to string) bool { return slices.Contains(Transitions[from], to) }

// Status is e's status with the empty default spelled out (running).
func Status(e *experimentv1.Experiment) string {
	if e.GetStatus() == "" {
		return StatusRunning
	}
	return e.GetStatus()
}

// Running reports whether e assigns units at time now: status running (or
// empty) and inside its schedule.
func Running(e *experimentv1.Experiment, now time.Time) bool {
	if Status(e) != StatusRunning {
		return false
	}
	if st := e.GetStartTime(); st != nil && now.Before(st.AsTime()) {
		return false
	}
	if et := e.GetEndTime(); et != nil && !now.Before(et.AsTime()) {
		return false
	}
	return true
}

// AppliesTo reports whether e targets proxies of cluster (empty services:
// every proxy).
func AppliesTo(e *experimentv1.Experiment, cluster string) bool {
	return len(e.GetServices()) == 0 || slices.Contains(e.GetServices(), cluster)
}

// Spec returns a copy of e without its output-only metadata (revision,
// create and update time and actor): the definition as its owner wrote it,
// as the store keeps it.
func Spec(e *experimentv1.Experiment) *experimentv1.Experiment {
	d := proto.Clone(e).(*experimentv1.Experiment)
	d.Revision, d.CreateTime, d.UpdateTime, d.CreatedBy, d.UpdatedBy = 0, nil, nil, "", ""
	return d
}

// Definition returns a copy of e with only what the proxies receive: what
// the filter evaluates, observe and the assignment revision; without
// output-only metadata, schedule and status (applied by the control
// plane), owner, services, description, guardrails, ramp and the rest of
// the state allotd writes. Changing a description or a guardrail
// therefore reconfigures no proxy; a ramp step does, through coverage.
func Definition(e *experimentv1.Experiment) *experimentv1.Experiment {
	d := Spec(e)
	d.StartTime, d.EndTime = nil, nil
	d.Description, d.Owner, d.Services = "", "", nil
	d.Status = ""
	d.Guardrails, d.Ramp = nil, nil
	ClearState(d)
	d.AssignmentRevision = e.GetAssignmentRevision() // the proxies tag outcome stats with it
	return d
}

// ClearState removes from e the state allotd writes (rampState,
// rollback, assignmentRevision): what an owner's write may not set.
func ClearState(e *experimentv1.Experiment) {
	e.RampState, e.Rollback, e.AssignmentRevision = nil, nil, 0
}

// CopyState sets dst's state (rampState, rollback, assignmentRevision) to
// a copy of src's: the admin API keeps the stored state whatever a write
// sends.
func CopyState(dst, src *experimentv1.Experiment) {
	dst.RampState, dst.Rollback = nil, nil
	dst.AssignmentRevision = src.GetAssignmentRevision()
	if src.RampState != nil {
		dst.RampState = proto.Clone(src.RampState).(*experimentv1.RampState)
	}
	if src.Rollback != nil {
		dst.Rollback = proto.Clone(src.Rollback).(*experimentv1.Rollback)
	}
}

// NextAssignment sets the assignment revision of e, which a write is about
// to store in place of old (nil: a create, revision 1): old's, or one more
// if the write changes what assigns units — a field the filter evaluates
// but observe (Definition), the schedule or the status. A pause and a
// start are two revisions, so figures counted before a pause (a rollback)
// are never evidence about the experiment started again.
func NextAssignment(e, old *experimentv1.Experiment) {
	if old == nil {
		e.AssignmentRevision = 1
		return
	}
	e.AssignmentRevision = old.GetAssignmentRevision()
	if !sameAssignment(e, old) {
		e.AssignmentRevision++
	}
}

// sameAssignment reports whether a and b assign every unit alike at every
// time: the same evaluated fields (observe aside), schedule and status.
func sameAssignment(a, b *experimentv1.Experiment) bool {
	if Status(a) != Status(b) || !proto.Equal(a.GetStartTime(), b.GetStartTime()) || !proto.Equal(a.GetEndTime(), b.GetEndTime()) {
		return false
	}
	da, db := Definition(a), Definition(b)
	da.Observe, db.Observe = false, false
	da.AssignmentRevision, db.AssignmentRevision = 0, 0
	return proto.Equal(da, db)
}

// RollbackPending reports whether e was rolled back by a guardrail and
// no owner has acknowledged it yet: starting it again needs an explicit
// acknowledgement.
func RollbackPending(e *experimentv1.Experiment) bool {
	return e.GetRollback() != nil && e.GetRollback().GetAcknowledgedBy() == ""
}

// Acknowledge records that actor acknowledged e's rollback at now (a no-op
// without a rollback), the name exactly as it is: a name ActorNameProblem
// refuses is an error and nothing is recorded, so that the state stays
// within StateReserveBytes and an acknowledged rollback is never pending.
func Acknowledge(e *experimentv1.Experiment, actor string, now time.Time) error {
	if e.GetRollback() == nil {
		return nil
	}
	if p := ActorNameProblem(actor); p != "" {
		return fmt.Errorf("acknowledge the rollback of %q: actor: %s", e.GetKey(), p)
	}
	e.Rollback.AcknowledgedBy, e.Rollback.AcknowledgeTime = actor, timestamppb.New(now)
	return nil
}

// RampStep is the index of the ramp step e is at (0 before allotd wrote
// any state).
func RampStep(e *experimentv1.Experiment) int { return int(e.GetRampState().GetStep()) }

// FillRampCoverage sets an unset coverage of an experiment with a ramp to
// the coverage of the step it is at, so that an owner need not repeat
// what the ramp decides (CheckFields refuses any other coverage).
func FillRampCoverage(e *experimentv1.Experiment) {
	steps := e.GetRamp().GetSteps()
	if e.Coverage == nil && RampStep(e) < len(steps) {
		c := steps[RampStep(e)].GetCoverage()
		e.Coverage = &c
	}
}

// CheckFields lists every problem of the fields the control plane itself
// reads (status, services, schedule), each as "path: message".
func CheckFields(e *experimentv1.Experiment) []string {
	var details []string
	if st := e.GetStatus(); st != "" && !KnownStatus(st) {
		details = append(details, "status: unknown status "+strconv.Quote(st)+", want draft, running, paused or stopped")
	}
	for i, svc := range e.GetServices() {
		if p := ServiceNameProblem(svc); p != "" {
			details = append(details, "services["+strconv.Itoa(i)+"]: "+p)
		}
	}
	start, end := e.GetStartTime(), e.GetEndTime()
	for _, t := range []struct {
		field string
		ts    *timestamppb.Timestamp
	}{{"startTime", start}, {"endTime", end}} {
		if t.ts != nil {
			if err := t.ts.CheckValid(); err != nil {
				details = append(details, t.field+": "+err.Error())
			}
		}
	}
	if start.IsValid() && end.IsValid() && !end.AsTime().After(start.AsTime()) {
		details = append(details, "endTime: must be after startTime")
	}
	details = append(details, checkGuardrails(e)...)
	return append(details, checkRamp(e)...)
}

// Guardrail metrics: the values of a guardrail's metric field, the
// sequential test's (control-plane/guard).
const (
	// MetricErrorRate is the share of 5xx among the requests answered
	// (aborted requests are left out); its threshold is maxIncrease.
	MetricErrorRate = string(guard.ErrorRate)
	// MetricLatencyP95 is the 95th percentile of the response time; its
	// threshold is maxRatio.
	MetricLatencyP95 = string(guard.LatencyP95)
)

// GuardrailRequests is g's minRequests with the default applied.
func GuardrailRequests(g *experimentv1.Guardrail) int64 {
	if g.GetMinRequests() == 0 {
		return DefaultGuardrailRequests
	}
	return g.GetMinRequests()
}

// Served reports whether e assigns any unit to variation v: its weight is
// above 0 (omitted weights are equal), or, with ranges, its range is not
// empty. Coverage scales every variation's share alike, so it changes
// nothing here. Guardrails skip a treatment that is not served (it never
// has requests: there is nothing to test), so a ramp does not wait for
// it; the control of a guardrail must be served (checkGuardrails). force
// does not change what is served: while it is set, the variations it
// displaces have no requests, their guardrails stay unevaluated and a ramp
// waits.
func Served(e *experimentv1.Experiment, v int) bool {
	if r := e.GetRanges().GetValues(); len(r) > 0 {
		if v < 0 || v >= len(r) {
			return true // the filter's decoder refuses the ranges
		}
		b := r[v].GetListValue().GetValues()
		return len(b) != 2 || !(b[1].GetNumberValue() <= b[0].GetNumberValue())
	}
	w := e.GetWeights()
	return len(w) != len(e.GetVariations()) || v < 0 || v >= len(w) || !(w[v] <= 0)
}

// checkGuardrails lists every problem of e's guardrails, each as
// "guardrails[i].field: message".
func checkGuardrails(e *experimentv1.Experiment) []string {
	var details []string
	if len(e.GetGuardrails()) > 0 && !e.GetObserve() {
		details = append(details, "guardrails: need observe: true (guardrails are evaluated on the outcomes the proxies observe)")
	}
	for i, g := range e.GetGuardrails() {
		path := "guardrails[" + strconv.Itoa(i) + "]"
		bad := func(field, msg string) { details = append(details, path+"."+field+": "+msg) }
		if g == nil {
			details = append(details, path+": want an object")
			continue
		}
		switch g.GetMetric() {
		case MetricErrorRate:
			if g.MaxIncrease == nil {
				bad("maxIncrease", "required for metric errorRate")
			} else if v := g.GetMaxIncrease(); !(v >= 0 && v <= 1) {
				bad("maxIncrease", fmt.Sprintf("%g, want within [0, 1]", v))
			}
			if g.MaxRatio != nil {
				bad("maxRatio", "only for metric latencyP95")
			}
		case MetricLatencyP95:
			if g.MaxRatio == nil {
				bad("maxRatio", "required for metric latencyP95")
			} else if v := g.GetMaxRatio(); !(v > 1 && v <= MaxGuardrailRatio) {
				bad("maxRatio", fmt.Sprintf("%g, want > 1 and at most %d", v, MaxGuardrailRatio))
			}
			if g.MaxIncrease != nil {
				bad("maxIncrease", "only for metric errorRate")
			}
		case "":
			bad("metric", "required: errorRate or latencyP95")
		default:
			bad("metric", "unknown metric "+strconv.Quote(g.GetMetric())+", want errorRate or latencyP95")
		}
		if c := g.GetControl(); c < 0 || int(c) >= len(e.GetVariations()) {
			bad("control", fmt.Sprintf("%d, want a variation index in [0, %d)", c, len(e.GetVariations())))
		} else if !Served(e, int(c)) {
			bad("control", fmt.Sprintf("variation %d is assigned no unit (weight 0 or an empty range), so there is nothing to compare with; want a variation with a share", c))
		}
		if n := g.GetMinRequests(); n != 0 && (n < MinGuardrailRequests || n > MaxGuardrailRequests) {
			bad("minRequests", fmt.Sprintf("%d, want 0 (default %d) or %d to %d", n, DefaultGuardrailRequests, MinGuardrailRequests, MaxGuardrailRequests))
		}
	}
	return details
}

// checkRamp lists every problem of e's ramp, each as "ramp.…: message",
// and of its coverage, which must be the coverage of the step the ramp is
// at.
func checkRamp(e *experimentv1.Experiment) []string {
	r := e.GetRamp()
	if r == nil {
		return nil
	}
	var details []string
	steps := r.GetSteps()
	if len(steps) == 0 {
		details = append(details, "ramp.steps: empty, want 1 to "+strconv.Itoa(MaxRampSteps)+" steps (or no ramp)")
	}
	prev := 0.0
	for i, st := range steps {
		path := "ramp.steps[" + strconv.Itoa(i) + "]"
		if st == nil {
			details = append(details, path+": want an object")
			continue
		}
		c := st.GetCoverage()
		switch {
		case !(c > 0 && c <= 1):
			details = append(details, fmt.Sprintf("%s.coverage: %g, want within (0, 1]", path, c))
		case i > 0 && c <= prev:
			details = append(details, fmt.Sprintf("%s.coverage: %g, want more than the previous step's %g", path, c, prev))
		}
		prev = c
		if h := st.GetMinHold(); h != nil {
			switch {
			case h.CheckValid() != nil:
				details = append(details, path+".minHold: "+h.CheckValid().Error())
			case h.GetNanos() != 0:
				details = append(details, path+".minHold: "+h.AsDuration().String()+", want whole seconds")
			case h.AsDuration() < 0 || h.AsDuration() > MaxRampHold:
				details = append(details, fmt.Sprintf("%s.minHold: %s, want 0s to %ds (30 days)", path, h.AsDuration(), int64(MaxRampHold/time.Second)))
			}
		}
	}
	step := RampStep(e)
	switch {
	case len(steps) == 0:
	case step < 0 || step >= len(steps):
		details = append(details, fmt.Sprintf("ramp.steps: %d steps, but the ramp is at step %d (rampState.step); keep that step", len(steps), step))
	case e.Coverage == nil || e.GetCoverage() != steps[step].GetCoverage():
		cov := "unset (1)"
		if e.Coverage != nil {
			cov = strconv.FormatFloat(e.GetCoverage(), 'g', -1, 64)
		}
		details = append(details, fmt.Sprintf("coverage: %s, want ramp.steps[%d].coverage %g while the ramp is at step %d (omit coverage to take it)", cov, step, steps[step].GetCoverage(), step))
	}
	return details
}
