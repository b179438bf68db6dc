package scenario

import (
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

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
