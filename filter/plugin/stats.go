package plugin

import (
	"github.com/allotmesh/allot/filter/wire"
)

// stats are a root's counters, accumulated in memory and flushed on tick.
type stats struct {
	evaluated, hits, misses, failOpen int64
	// sticky cookies: invalid, oversized, stale, written, dropped
	stickyInvalid, stickyOversized, stickyStale, stickyWritten, stickyDropped int64
	variations                                                                [][]int64 // [experiment][variation]
	// outcomesUnrecorded counts observed requests whose outcomes the host
	// could not keep (CountUnrecorded); unrecordedID is its counter, defined
	// only with an observed experiment (hasUnrecorded).
	outcomesUnrecorded int64
	unrecordedID       uint32
	hasUnrecorded      bool
	// ofrep counts OFREP evaluations and errors (ofrepIDs), defined only
	// when the configuration answers OFREP (hasOfrep).
	ofrep    [2]int64
	ofrepIDs [2]uint32
	hasOfrep bool

	ids        [9]uint32 // of the fixed counters, in fixed's order
	nfixed     int       // fixed counters defined: 4, or 9 with a sticky cookie
	varIDs     [][]uint32
	defineFail bool

	// outcomes[slot][class] count the responses of observed variations
	// (Config.Outcomes' slots); outIDs are their counters, latIDs their
	// latency histograms. Empty when nothing is observed or the host
	// records outcomes itself.
	outcomes [][wire.NumClasses]int64
	outIDs   [][wire.NumClasses]uint32
	latIDs   []uint32
}

// fixed lists the counters every configuration has, then those of sticky
// bucketing, in MetricNames' order.
func (s *stats) fixed() [9]*int64 {
	return [9]*int64{&s.evaluated, &s.hits, &s.misses, &s.failOpen,
		&s.stickyInvalid, &s.stickyOversized, &s.stickyStale, &s.stickyWritten, &s.stickyDropped}
}

// MetricNames lists every counter a root with configuration c defines,
// in the order it defines them: a host that must declare metrics ahead of
// the plugin (the native module, at configuration time) declares these.
func (c *Config) MetricNames() []string {
	names := []string{wire.MetricEvaluated, wire.MetricCacheHits, wire.MetricCacheMisses, wire.MetricFailOpen}
	if c.jar != nil {
		names = append(names, wire.MetricStickyInvalid, wire.MetricStickyOversized, wire.MetricStickyStale, wire.MetricStickyWritten, wire.MetricStickyDropped)
	}
	for i, key := range c.keys {
		for v := range c.values[i] {
			names = append(names, wire.VariationMetric(key, v))
		}
	}
	if c.Observed() {
		names = append(names, wire.MetricOutcomesUnrecorded)
	}
	if c.ofrep != nil {
		names = append(names, wire.MetricOfrepEvaluations, wire.MetricOfrepErrors)
	}
	return names
}

// define defines the metrics for cfg, the outcome stats too when
// outcomes; counters start at zero.
func (s *stats) define(h Host, cfg *Config, outcomes bool) {
	s.defineFail = false
	ids := make([]uint32, 0, 4+len(cfg.keys)*2)
	for _, name := range cfg.MetricNames() {
		id, err := h.DefineMetric(Counter, name)
		if err != nil {
			s.defineFail = true
		}
		ids = append(ids, id)
	}
	s.nfixed = 4
	if cfg.jar != nil {
		s.nfixed = len(s.ids)
	}
	copy(s.ids[:], ids[:s.nfixed])
	ids = ids[s.nfixed:]
	s.variations = make([][]int64, cfg.Len())
	s.varIDs = make([][]uint32, cfg.Len())
	for i := range cfg.keys {
		n := len(cfg.values[i])
		s.variations[i] = make([]int64, n)
		s.varIDs[i], ids = ids[:n:n], ids[n:]
	}
	s.hasUnrecorded = cfg.Observed()
	if s.hasUnrecorded {
		s.unrecordedID, ids = ids[0], ids[1:]
	}
	if s.hasOfrep = cfg.ofrep != nil; s.hasOfrep {
		copy(s.ofrepIDs[:], ids)
	}
	s.outcomes, s.outIDs, s.latIDs = nil, nil, nil
	if outcomes && cfg.Observed() {
		out := cfg.Outcomes()
		s.outcomes = make([][wire.NumClasses]int64, len(out))
		s.outIDs = make([][wire.NumClasses]uint32, len(out))
		s.latIDs = make([]uint32, len(out))
		for slot, o := range out {
			for class, name := range o.Counters {
				id, err := h.DefineMetric(Counter, name)
				if err != nil {
					s.defineFail = true
				}
				s.outIDs[slot][class] = id
			}
			id, err := h.DefineMetric(Histogram, o.Latency)
			if err != nil {
				s.defineFail = true
			}
			s.latIDs[slot] = id
		}
	}
	if s.defineFail {
		h.Log(wire.LogWarn, "allot: some metrics could not be defined; their counts are dropped")
	}
}

// flush adds the accumulated counts to Envoy's stats and resets them.
func (r *Root) flush(h Host) {
	s := &r.stats
	if r.cfg == nil || s.defineFail {
		clear(s.outcomes)
		*s = stats{ids: s.ids, nfixed: s.nfixed, varIDs: s.varIDs, variations: zero(s.variations), defineFail: s.defineFail,
			outcomes: s.outcomes, outIDs: s.outIDs, latIDs: s.latIDs, unrecordedID: s.unrecordedID, hasUnrecorded: s.hasUnrecorded,
			ofrepIDs: s.ofrepIDs, hasOfrep: s.hasOfrep}
		return
	}
	for i, n := range s.fixed() {
		if i >= s.nfixed {
			*n = 0
		} else if *n != 0 {
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
	if s.hasUnrecorded && s.outcomesUnrecorded != 0 {
		h.IncrementMetric(s.unrecordedID, s.outcomesUnrecorded)
	}
	s.outcomesUnrecorded = 0
	for i, n := range s.ofrep {
		if s.hasOfrep && n != 0 {
			h.IncrementMetric(s.ofrepIDs[i], n)
		}
		s.ofrep[i] = 0
	}
	for slot := range s.outcomes {
		for class, n := range s.outcomes[slot] {
			if n != 0 {
				h.IncrementMetric(s.outIDs[slot][class], n)
				s.outcomes[slot][class] = 0
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
