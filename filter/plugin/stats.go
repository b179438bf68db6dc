package plugin

import (
	"strconv"

	"github.com/allotmesh/allot/filter/abi"
)

// Metric names. Envoy shows Wasm-defined metrics under the "wasmcustom."
// prefix, e.g. wasmcustom.allot.requests_evaluated.
const (
	MetricEvaluated   = "allot.requests_evaluated"
	MetricCacheHits   = "allot.cache_hits"
	MetricCacheMisses = "allot.cache_misses"
	MetricFailOpen    = "allot.fail_open"
)

// VariationMetric names the counter of units assigned to variation v of
// experiment key.
func VariationMetric(key string, v int) string {
	return "allot.experiment." + key + ".variation." + strconv.Itoa(v)
}

// stats are a root's counters, accumulated in memory and flushed on tick.
type stats struct {
	evaluated, hits, misses, failOpen int64
	variations                        [][]int64 // [experiment][variation]

	ids        [4]uint32 // evaluated, hits, misses, failOpen
	varIDs     [][]uint32
	defineFail bool
}

// define defines the metrics for cfg; counters start at zero.
func (s *stats) define(h abi.Host, cfg *Config) {
	s.defineFail = false
	for i, name := range []string{MetricEvaluated, MetricCacheHits, MetricCacheMisses, MetricFailOpen} {
		id, err := h.DefineMetric(abi.MetricCounter, name)
		if err != nil {
			s.defineFail = true
		}
		s.ids[i] = id
	}
	s.variations = make([][]int64, cfg.Len())
	s.varIDs = make([][]uint32, cfg.Len())
	for i, key := range cfg.keys {
		s.variations[i] = make([]int64, len(cfg.values[i]))
		s.varIDs[i] = make([]uint32, len(cfg.values[i]))
		for v := range cfg.values[i] {
			id, err := h.DefineMetric(abi.MetricCounter, VariationMetric(key, v))
			if err != nil {
				s.defineFail = true
			}
			s.varIDs[i][v] = id
		}
	}
	if s.defineFail {
		h.Log(abi.LogWarn, "allot: some metrics could not be defined; their counts are dropped")
	}
}

// flush adds the accumulated counts to Envoy's stats and resets them.
func (r *root) flush(h abi.Host) {
	s := &r.stats
	if r.cfg == nil || s.defineFail {
		*s = stats{ids: s.ids, varIDs: s.varIDs, variations: zero(s.variations), defineFail: s.defineFail}
		return
	}
	for i, n := range []*int64{&s.evaluated, &s.hits, &s.misses, &s.failOpen} {
		if *n != 0 {
			h.IncrementMetric(s.ids[i], *n)
			*n = 0
		}
	}
	for i := range s.variations {
		for v, n := range s.variations[i] {
			if n != 0 {
				h.IncrementMetric(s.varIDs[i][v], n)
				s.variations[i][v] = 0
			}
		}
	}
}

func zero(v [][]int64) [][]int64 {
	for i := range v {
		clear(v[i])
	}
	return v
}
