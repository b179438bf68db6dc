package scenario

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/wire"
)

// statPrefix is what Envoy puts before Allot's metric names in both
// artifacts (the Wasm host's prefix; the native variants' namespace).
const statPrefix = variant.MetricsNamespace + "."

// outcomeStat reports whether name (as Envoy lists it) is an outcome
// counter of an observed variation, and of which experiment.
func outcomeStat(name string) (key string, class string, ok bool) {
	metric, ok := strings.CutPrefix(name, statPrefix)
	if !ok {
		return "", "", false
	}
	key, _, _, c, ok := wire.ParseOutcomeMetric(metric)
	if !ok || c == wire.Latency {
		return "", "", false
	}
	return key, wire.ClassName(c), true
}

// readObserved reads the outcome counters of an Allot variant's Envoy.
func readObserved(e *envoy, sent int64) (report.ObservedStats, error) {
	all, err := e.Stats()
	if err != nil {
		return report.ObservedStats{}, err
	}
	o := report.ObservedStats{Sent: sent, Responses: map[string]int64{}}
	o.Unrecorded, o.HasUnrecorded = all[statPrefix+wire.MetricOutcomesUnrecorded]
	for name, n := range all {
		key, class, ok := outcomeStat(name)
		if !ok {
			continue
		}
		o.Stats++
		o.Responses[key] += n
		if class == wire.ClassName(wire.Class2xx) {
			o.OK += n
		}
	}
	return o, nil
}

// observedWait bounds the wait for the pre-flight's outcomes: the Wasm
// module adds its counts to Envoy's once a second (the native module at
// each response).
const observedWait = 5 * time.Second

// checkOutcomes is the pre-flight's check of the outcome stats after sent
// pre-flight requests: an observe variant's Envoy lists every observed
// experiment's and no other's, and allot.outcomes_unrecorded, and has
// counted the pre-flight's responses (every one is in observedKey), all
// 2xx; another Allot variant lists none of them.
func checkOutcomes(e *envoy, v variant.Variant, sent int64) error {
	deadline := time.Now().Add(observedWait)
	for {
		o, err := readObserved(e, sent)
		if err != nil {
			return err
		}
		if !v.Observe {
			if o.Stats > 0 || o.HasUnrecorded {
				return fmt.Errorf("outcome stats: %d listed (%v), %s listed %v, want none: no experiment of %s observes",
					o.Stats, o.Responses, wire.MetricOutcomesUnrecorded, o.HasUnrecorded, v.ID)
			}
			return nil
		}
		keys := slices.Sorted(maps.Keys(o.Responses))
		if !slices.Equal(keys, slices.Sorted(slices.Values(variant.ObservedKeys))) || !o.HasUnrecorded {
			return fmt.Errorf("outcome stats of experiments %q, want %q; %s listed %v, want true", keys, variant.ObservedKeys,
				wire.MetricOutcomesUnrecorded, o.HasUnrecorded)
		}
		got := o.Responses[variant.ObservedKey]
		if got >= sent {
			if got != sent || o.OK != o.Total() {
				return fmt.Errorf("outcome stats after %d pre-flight requests: %s's responses %d, %d of %d 2xx", sent, variant.ObservedKey, got, o.OK, o.Total())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outcome stats after %d pre-flight requests: %s's responses %d after %v", sent, variant.ObservedKey, got, observedWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
