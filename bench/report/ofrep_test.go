package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

// TestOFREPRows: each OFREP row sets the bulk evaluation against the
// header request of the same configuration in the same rounds — CPU added
// over A by each, their difference and the ratio of the additions with
// their 95% intervals — and is left out when the run did not measure its
// header request.
func TestOFREPRows(t *testing.T) {
	res := &Results{
		Variants: []variant.Info{{ID: "A"}, {ID: "G"}, {ID: "Q", WasmTwin: "G"}, {ID: "e", Cost: true}, {ID: "f", Cost: true, WasmTwin: "e"}},
		Paired: &Paired{Rounds: 10, CPU: map[string][]float64{"A": steady(20), "G": steady(40), "Q": steady(30), "e": steady(70), "f": steady(45)},
			RPS: map[string][]float64{"A": steady(40000), "G": steady(20000), "Q": steady(30000), "e": steady(10000), "f": steady(15000)}},
	}
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "report", out,
		"### OFREP bulk evaluation against a header request",
		"| Wasm | a bulk evaluation of the 50 experiments",
		"(e against G) | e | G | +20.0 | +50.0 | +30.0 (+30.0 … +30.0) | 2.50 (2.50–2.50 ×) | 0.50 (0.50–0.50 ×) |",
		"| native | the same evaluation on the native module",
		"(f against Q) | f | Q | +10.0 | +25.0 | +15.0 (+15.0 … +15.0) | 2.50 (2.50–2.50 ×) | 0.50 (0.50–0.50 ×) |",
	)
	res.Variants = slices.DeleteFunc(res.Variants, func(v variant.Info) bool { return v.ID == "Q" })
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "(f against Q)") || !strings.Contains(out, "(e against G)") {
		t.Errorf("without Q: want e's row alone:\n%s", out)
	}
	res.Variants = slices.DeleteFunc(res.Variants, func(v variant.Info) bool { return v.ID == "G" })
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "OFREP bulk evaluation") {
		t.Errorf("without G and Q: want no OFREP section:\n%s", out)
	}
}
