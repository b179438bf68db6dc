package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

// TestObserveRows: each observe row sets its variant against its
// baseline of the same rounds, with Allot's figures from /stats — bench's
// responses and all outcomes per request sent, the 2xx share, the outcome
// counters of the variant and of its baseline — and is left out when the
// run did not measure its baseline.
func TestObserveRows(t *testing.T) {
	res := &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "G"}, {ID: "Q", WasmTwin: "G"}, {ID: "Z", Cost: true}, {ID: "z", Cost: true, WasmTwin: "Z"}},
		Paired: &Paired{Rounds: 10, CPU: map[string][]float64{"A": steady(20), "G": steady(40), "Q": steady(30), "Z": steady(42), "z": steady(31)},
			RPS: map[string][]float64{"A": steady(40000), "G": steady(20000), "Q": steady(30000), "Z": steady(19000), "z": steady(30000)},
			Observed: map[string]ObservedStats{
				"G": {Sent: 1000, Responses: map[string]int64{}},
				"Q": {Sent: 1000, Responses: map[string]int64{}},
				"Z": {Sent: 1000, Stats: 84, OK: 4600, Responses: map[string]int64{"bench": 1000, "exp-0004": 900, "exp-0006": 900, "exp-0010": 900, "exp-0012": 900}},
				"z": {Sent: 2000, Stats: 84, OK: 9000, Unrecorded: 3, Responses: map[string]int64{"bench": 1990, "exp-0004": 1760, "exp-0006": 1760, "exp-0010": 1750, "exp-0012": 1740}},
			}},
	}
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"### Observing outcomes: what `observe` costs",
		"(Z against G) | Z | G | +20.0 | +22.0 | +2.0 (+2.0 … +2.0) | 1.10 (1.10–1.10 ×) | 0.95 (0.95–0.95 ×) | 1.00 `bench` responses per request sent, 4.60 outcomes per request, 100.0% 2xx; 84 outcome counters (G: 0) |",
		"(z against Q) | z | Q | +10.0 | +11.0 | +1.0 (+1.0 … +1.0) | 1.10 (1.10–1.10 ×) | 1.00 (1.00–1.00 ×) | 0.99 `bench` responses per request sent, 4.50 outcomes per request, 100.0% 2xx; 84 outcome counters (Q: 0), 3 unrecorded |",
	)
	res.Variants = slices.DeleteFunc(res.Variants, func(v variant.Info) bool { return v.ID == "Q" })
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "(z against Q)") || !strings.Contains(out, "(Z against G)") {
		t.Errorf("without Q: want Z's row alone:\n%s", out)
	}
}
