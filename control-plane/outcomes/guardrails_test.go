package outcomes

import (
	"context"
	"testing"
)

// TestSharedReportSkipsUnserved: a replica's report, merged from the
// shared records, tests no guardrail for a treatment of weight 0 (it gets
// no requests), as a lone allotd's does (guardian's
// TestRampWithZeroWeightVariationAdvances).
func TestSharedReportSkipsUnserved(t *testing.T) {
	m := newMesh(t, `{"key":"checkout","variations":["a","b","c"],"weights":[0.5,0.5,0],"observe":true,
		"guardrails":[{"metric":"errorRate","maxIncrease":0.01}]}`)
	r := m.replica("r1", true)
	r.addPublished(t, "p1", 0, 10)
	rep, err := r.a.Report(context.Background(), "checkout", 1)
	if err != nil {
		t.Fatal(err)
	}
	if gs := rep.GetGuardrails(); len(gs) != 1 || gs[0].GetVariation() != 1 {
		t.Errorf("guardrail statuses %v, want variation 1's alone", gs)
	}
}
