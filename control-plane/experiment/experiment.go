// Package experiment holds what is true of one experiment document, with no
// I/O: its lifecycle (the statuses, the transitions between them, whether
// it runs at a time, which services it applies to), the forms it is kept
// and served in (Spec, Definition) and the bounds of the document and its
// fields (CheckBounds, CheckFields). translate, admin and allotctl all
// decide these questions here; the console's transition table is checked
// against Transitions by a test.
//
// It imports only the standard library, the proto packages and the filter's
// engine (to render a variation as the filter does); it must not import
// any other control-plane package.
package experiment

import (
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

// Definition returns a copy of e with only what the filter evaluates:
// without output-only metadata, schedule and status (applied by the control
// plane), owner, services and description. Changing a description therefore
// reconfigures no proxy.
func Definition(e *experimentv1.Experiment) *experimentv1.Experiment {
	d := Spec(e)
	d.StartTime, d.EndTime = nil, nil
	d.Description, d.Owner, d.Services = "", "", nil
	d.Status = ""
	return d
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
	return details
}
