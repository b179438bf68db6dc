package variant

import (
	"fmt"
	"slices"

	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// ObservedKeys are the experiments the observe variants (Z, z) observe:
// of G's 50, five every warm unit's requests match (US, iOS, 2.3.1 —
// experimentsJSON: i%6 is 0 or 4), "bench" among them, so every request
// takes the observe path (bench covers every unit) and most take it for
// all five (the others cover 90% of units). TestObservedKeysAssigned
// holds the engine to it.
var ObservedKeys = []string{"bench", "exp-0004", "exp-0006", "exp-0010", "exp-0012"}

// ObservedKey is the observed experiment every request is in: its
// responses, summed over its variations, are the requests the variant
// served.
const ObservedKey = "bench"

// observe marks the observedKeys of cfg as observed.
func observe(cfg *filterv1.FilterConfig) error {
	found := 0
	for _, e := range cfg.GetExperiments() {
		if slices.Contains(ObservedKeys, e.GetKey()) {
			e.Observe = true
			found++
		}
	}
	if found != len(ObservedKeys) {
		return fmt.Errorf("observe: %d of the experiments %q among %d", found, ObservedKeys, len(cfg.GetExperiments()))
	}
	return nil
}
