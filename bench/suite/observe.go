package suite

// The observe rows (#35): what `observe: true` costs per request, in each
// artifact — G's 50 experiments with 5 of them observed (Z, z), each set
// against G's configuration with none observed (G, Q) in the same
// interleaved rounds. The baseline is the configuration of experiments
// that do not ask, so the rows are also how a mesh reads "no cost for
// experiments that do not ask" (bench/README.md).

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/filter/wire"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// observedKeys are the experiments the observe variants (Z, z) observe:
// of G's 50, five every warm unit's requests match (US, iOS, 2.3.1 —
// experimentsJSON: i%6 is 0 or 4), "bench" among them, so every request
// takes the observe path (bench covers every unit) and most take it for
// all five (the others cover 90% of units). TestObservedKeysAssigned
// holds the engine to it.
var observedKeys = []string{"bench", "exp-0004", "exp-0006", "exp-0010", "exp-0012"}

// observedKey is the observed experiment every request is in: its
// responses, summed over its variations, are the requests the variant
// served.
const observedKey = "bench"

// statPrefix is what Envoy puts before Allot's metric names in both
// artifacts (the Wasm host's prefix; the native variants' namespace).
const statPrefix = metricsNamespace + "."

// observe marks the observedKeys of cfg as observed.
func observe(cfg *filterv1.FilterConfig) error {
	found := 0
	for _, e := range cfg.GetExperiments() {
		if slices.Contains(observedKeys, e.GetKey()) {
			e.Observe = true
			found++
		}
	}
	if found != len(observedKeys) {
		return fmt.Errorf("observe: %d of the experiments %q among %d", found, observedKeys, len(cfg.GetExperiments()))
	}
	return nil
}

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

// observedStats are what an Allot variant's Envoy lists of outcomes:
// the proof that an observe row measured its scenario and its baseline
// none.
type observedStats struct {
	// Sent is how many requests the variant was sent in the section,
	// pre-flight and warm-up included.
	Sent int64 `json:"sent"`
	// Stats is how many outcome counters Envoy lists.
	Stats int `json:"stats"`
	// Responses[key] are the responses counted over experiment key's
	// variations and classes; OK those counted 2xx.
	Responses map[string]int64 `json:"responses,omitempty"`
	OK        int64            `json:"ok"`
	// Unrecorded is allot.outcomes_unrecorded; HasUnrecorded says Envoy
	// lists it (defined only with an observed experiment).
	Unrecorded    int64 `json:"unrecorded"`
	HasUnrecorded bool  `json:"has_unrecorded"`
}

// readObserved reads the outcome counters of an Allot variant's Envoy.
func readObserved(e *envoy, sent int64) (observedStats, error) {
	all, err := e.Stats()
	if err != nil {
		return observedStats{}, err
	}
	o := observedStats{Sent: sent, Responses: map[string]int64{}}
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
func checkOutcomes(e *envoy, v variant, sent int64) error {
	deadline := time.Now().Add(observedWait)
	for {
		o, err := readObserved(e, sent)
		if err != nil {
			return err
		}
		if !v.observe {
			if o.Stats > 0 || o.HasUnrecorded {
				return fmt.Errorf("outcome stats: %d listed (%v), %s listed %v, want none: no experiment of %s observes",
					o.Stats, o.Responses, wire.MetricOutcomesUnrecorded, o.HasUnrecorded, v.ID)
			}
			return nil
		}
		keys := slices.Sorted(maps.Keys(o.Responses))
		if !slices.Equal(keys, slices.Sorted(slices.Values(observedKeys))) || !o.HasUnrecorded {
			return fmt.Errorf("outcome stats of experiments %q, want %q; %s listed %v, want true", keys, observedKeys,
				wire.MetricOutcomesUnrecorded, o.HasUnrecorded)
		}
		got := o.Responses[observedKey]
		if got >= sent {
			if got != sent || o.OK != o.total() {
				return fmt.Errorf("outcome stats after %d pre-flight requests: %s's responses %d, %d of %d 2xx", sent, observedKey, got, o.OK, o.total())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outcome stats after %d pre-flight requests: %s's responses %d after %v", sent, observedKey, got, observedWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// total is every response counted, over the observed experiments.
func (o observedStats) total() int64 {
	var n int64
	for _, v := range o.Responses {
		n += v
	}
	return n
}

// observeRows are what observing outcomes costs each artifact (#35): the
// variant with 5 of its 50 experiments observed against G's configuration,
// where none is, in the same interleaved rounds. The requirement
// is that experiments that do not ask cost nothing: the baseline is that
// configuration, and the rows are reported, not judged.
var observeRows = []costSpec{
	{"Wasm", "5 of the 50 experiments observed: a clock read at the request, then at the response a `:status` read, a clock read and a histogram sample per observed assignment (Z against G)", "Z", "G"},
	{"native", "the same configuration: the observed stat ids copied into the stream's C state (one cgo call, one malloc) at the request, the response counted and timed in C (z against Q)", "z", "Q"},
}

// observeRow is one of observeRows, measured.
type observeRow struct {
	costRow
	// HasStats: the run read the variant's and the baseline's outcome
	// stats at the end of the section.
	HasStats bool
	// PerSent is observedKey's responses per request sent to the variant
	// (every request is in it: 1.00 when every outcome was counted);
	// PerRequest the observed outcomes per request, over the five; OK the
	// share of them that were 2xx.
	PerSent, PerRequest, OK float64
	Stats, BaseStats        int
	Unrecorded              int64
}

// observe are the observe rows the run measured.
func (v *reportView) observe() {
	for _, t := range observeRows {
		c, ok := v.costRow(t)
		if !ok || c.Base == "" {
			continue
		}
		row := observeRow{costRow: c}
		x, okX := v.Paired.Observed[t.x]
		b, okB := v.Paired.Observed[t.base]
		if okX && okB && x.Sent > 0 {
			row.HasStats = true
			row.PerSent = float64(x.Responses[observedKey]) / float64(x.Sent)
			row.PerRequest = float64(x.total()) / float64(x.Sent)
			if n := x.total(); n > 0 {
				row.OK = float64(x.OK) / float64(n)
			}
			row.Stats, row.BaseStats, row.Unrecorded = x.Stats, b.Stats, x.Unrecorded
		}
		v.Observe = append(v.Observe, row)
	}
}

// observedNames are the observed experiments as the report lists them.
func observedNames() string {
	var q []string
	for _, k := range observedKeys {
		q = append(q, strconv.Quote(k))
	}
	return strings.Join(q, ", ")
}
