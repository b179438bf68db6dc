package suite

import (
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
)

// TestObservedKeysAssigned: the observe variants' configuration marks
// exactly observedKeys observed, and the engine assigns the warm units to
// them — bench every unit, each other key at least 85% of them (its
// coverage is 90%) — so the observe path runs on every request and for
// most of the five.
func TestObservedKeysAssigned(t *testing.T) {
	for _, id := range []string{"Z", "z"} {
		if v := variantByID(t, id); !v.observe || !v.cost || v.allot != 50 {
			t.Errorf("%s: observe %v, cost %v, %d experiments", id, v.observe, v.cost, v.allot)
		}
	}
	cfg, err := allotConfig(50, observed)
	if err != nil {
		t.Fatal(err)
	}
	var marked []string
	for _, e := range cfg.GetExperiments() {
		if e.GetObserve() {
			marked = append(marked, e.GetKey())
		}
	}
	if !slices.Equal(marked, observedKeys) {
		t.Fatalf("observed %q, want %q", marked, observedKeys)
	}
	_, set, err := config.Parse(filterConfigJSON(50))
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]int{}
	for u := range warmIDs {
		attrs := engine.Attributes{"id": unitID(uint64(u)), "country": "US", "platform": "ios", "version": "2.3.1"}
		for i, a := range set.Assign(nil, attrs) {
			if a.InExperiment {
				in[set.Keys()[i]]++
			}
		}
	}
	for _, key := range observedKeys {
		want := warmIDs * 85 / 100
		if key == observedKey {
			want = warmIDs
		}
		if in[key] < want {
			t.Errorf("%s: %d of %d warm units assigned, want at least %d", key, in[key], warmIDs, want)
		}
	}
}

// TestOutcomeStat: the outcome counters are told from Allot's other
// stats (the assignment counters, the histogram, the fixed counters)
// by their names as Envoy lists them.
func TestOutcomeStat(t *testing.T) {
	for _, tc := range []struct {
		name, key, class string
		ok               bool
	}{
		{statPrefix + wire.OutcomeMetric("exp-0004", 0, 2, wire.Class5xx), "exp-0004", "5xx", true},
		{statPrefix + wire.OutcomeMetric("bench", 40, 0, wire.ClassAborted), "bench", "aborted", true},
		{statPrefix + wire.VariationMetric("bench", 1), "", "", false},
		{statPrefix + wire.OutcomeMetric("bench", 0, 1, wire.Latency), "", "", false},
		{statPrefix + wire.MetricOutcomesUnrecorded, "", "", false},
		{wire.OutcomeMetric("bench", 0, 0, wire.Class2xx), "", "", false}, // without Envoy's prefix
	} {
		key, class, ok := outcomeStat(tc.name)
		if key != tc.key || class != tc.class || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.name, key, class, ok, tc.key, tc.class, tc.ok)
		}
	}
}

// TestObserveRows: each observe row sets its variant against its
// baseline of the same rounds, with Allot's figures from /stats — bench's
// responses and all outcomes per request sent, the 2xx share, the outcome
// counters of the variant and of its baseline — and is left out when the
// run did not measure its baseline.
func TestObserveRows(t *testing.T) {
	res := &results{
		Variants: []variantInfo{{ID: "A"}, {ID: "G"}, {ID: "Q", WasmTwin: "G"}, {ID: "Z", Cost: true}, {ID: "z", Cost: true, WasmTwin: "Z"}},
		Paired: &paired{Rounds: 10, CPU: map[string][]float64{"A": steady(20), "G": steady(40), "Q": steady(30), "Z": steady(42), "z": steady(31)},
			RPS: map[string][]float64{"A": steady(40000), "G": steady(20000), "Q": steady(30000), "Z": steady(19000), "z": steady(30000)},
			Observed: map[string]observedStats{
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
	res.Variants = slices.DeleteFunc(res.Variants, func(v variantInfo) bool { return v.ID == "Q" })
	out, err = renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "(z against Q)") || !strings.Contains(out, "(Z against G)") {
		t.Errorf("without Q: want Z's row alone:\n%s", out)
	}
}
