package variant

import (
	"slices"
	"testing"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
)

// TestObservedKeysAssigned: the observe variants' configuration marks
// exactly observedKeys observed, and the engine assigns the warm units to
// them — bench every unit, each other key at least 85% of them (its
// coverage is 90%) — so the observe path runs on every request and for
// most of the five.
func TestObservedKeysAssigned(t *testing.T) {
	for _, id := range []string{"Z", "z"} {
		if v := variantByID(t, id); !v.Observe || !v.Cost || v.Allot != 50 {
			t.Errorf("%s: observe %v, cost %v, %d experiments", id, v.Observe, v.Cost, v.Allot)
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
	if !slices.Equal(marked, ObservedKeys) {
		t.Fatalf("observed %q, want %q", marked, ObservedKeys)
	}
	_, set, err := config.Parse(FilterConfigJSON(50))
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]int{}
	for u := range WarmIDs {
		attrs := engine.Attributes{"id": unitID(uint64(u)), "country": "US", "platform": "ios", "version": "2.3.1"}
		for i, a := range set.Assign(nil, attrs) {
			if a.InExperiment {
				in[set.Keys()[i]]++
			}
		}
	}
	for _, key := range ObservedKeys {
		want := WarmIDs * 85 / 100
		if key == ObservedKey {
			want = WarmIDs
		}
		if in[key] < want {
			t.Errorf("%s: %d of %d warm units assigned, want at least %d", key, in[key], WarmIDs, want)
		}
	}
}
