package outcomes

import (
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/guard"
	"github.com/allotmesh/allot/filter/wire"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Guardrail is an experiment's guardrail as the sequential test takes it
// (control-plane/guard), with its control variation.
func Guardrail(g *experimentv1.Guardrail) (guard.Guardrail, int) {
	return guard.Guardrail{Metric: guard.Metric(g.GetMetric()), MaxIncrease: g.GetMaxIncrease(), MaxRatio: g.GetMaxRatio(),
		MinRequests: uint64(experiment.GuardrailRequests(g))}, int(g.GetControl())
}

// guardCounts is t as the sequential test takes it: the requests that got
// a response, and the 5xx among them. An aborted request (the downstream
// client went first) is no evidence either way, so that no client can
// make a variation look worse, or better, by abandoning its requests.
func (t tally) guardCounts() guard.Counts {
	c := guard.Counts{Requests: t.responses(), Errors: t.counts[wire.Class5xx], Bounds: wire.LatencyBounds}
	if len(t.buckets) > 0 {
		c.Buckets = t.buckets
	}
	return c
}

// check runs every guardrail of e for every treatment the experiment
// serves (experiment.Served) on the totals since the revision; a.mu must
// be held.
func (e *expState) check() []*adminv1.GuardrailStatus {
	var out []*adminv1.GuardrailStatus
	for i, pg := range e.guardrails {
		g, control := Guardrail(pg)
		if control < 0 || control >= len(e.total) || !experiment.Served(e.def, control) {
			continue // validation keeps it a served variation's index
		}
		c := e.total[control].guardCounts()
		for v := range e.total {
			if v == control || !experiment.Served(e.def, v) {
				continue // no unit gets it: never evidence, never waited for
			}
			d := guard.Check(g, c, e.total[v].guardCounts())
			out = append(out, &adminv1.GuardrailStatus{Guardrail: int32(i), Metric: string(g.Metric), Control: int32(control), Variation: int32(v),
				Evaluated: d.Evaluated, Breached: d.Breached, Statistic: d.Statistic, PValue: d.PValue, Estimate: d.Estimate,
				Threshold: d.Threshold, ControlValue: d.Control, TreatmentValue: d.Treatment, Reason: d.Reason})
		}
	}
	return out
}
