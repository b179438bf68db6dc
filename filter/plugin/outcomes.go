package plugin

import (
	"github.com/allotmesh/allot/filter/wire"
)

// OutcomeStats are the stats of one observed variation (one outcome slot):
// a counter per class and the latency histogram.
type OutcomeStats struct {
	Counters [wire.NumClasses]string
	Latency  string
}

// observe lays out the outcome slots: one per variation of each observed
// experiment, in definition order.
func (c *Config) observe(observed []bool) {
	c.outBase = make([]int32, len(c.keys))
	for i := range c.keys {
		c.outBase[i] = -1
		if observed[i] {
			c.outBase[i] = int32(c.nslots)
			c.nslots += len(c.values[i])
		}
	}
}

// Observed reports whether some experiment of the configuration observes
// its outcomes: then its requests leave outcome slots for their responses
// (Plugin.Observed).
func (c *Config) Observed() bool { return c.nslots > 0 }

// Outcomes lists the stats of every outcome slot, in slot order: a host
// that records outcomes itself (OutcomeRecorder) defines these.
func (c *Config) Outcomes() []OutcomeStats {
	out := make([]OutcomeStats, 0, c.nslots)
	for i, key := range c.keys {
		if c.outBase[i] < 0 {
			continue
		}
		for v := range c.values[i] {
			var s OutcomeStats
			for class := range wire.NumClasses {
				s.Counters[class] = wire.OutcomeMetric(key, c.revs[i], v, class)
			}
			s.Latency = wire.OutcomeMetric(key, c.revs[i], v, wire.Latency)
			out = append(out, s)
		}
	}
	return out
}

// Observation is what a stream of an observed request waits with for
// its response, when the host keeps streams (proxy-wasm: the adapter keeps
// it per stream; the native module keeps the same in C). Observe fills
// one, ObserveResponse counts it; a host reuses it after that.
type Observation struct {
	r   *Root
	cfg *Config
	// outIDs and latIDs are the root's stat ids when the request was
	// assigned: a response after the root was reconfigured counts in
	// them, the stats of the revisions that assigned it.
	outIDs [][wire.NumClasses]uint32
	latIDs []uint32
	start  int64 // the host's clock at the request headers, ns
	timed  bool  // start was read
	slots  []int32
}

// Observe keeps, in ob (nil: a new one), the outcome slots the last
// request, of root r, assigned (Observed) for its stream's response, and
// returns it; nil when the host records outcomes itself
// (OutcomeRecorder). A failure to read the clock costs the request its
// latency sample only.
//
//go:noinline
func (p *Plugin) Observe(r *Root, ob *Observation) *Observation {
	if p.hostOutcomes {
		return nil
	}
	if ob == nil {
		ob = &Observation{}
	}
	ob.r, ob.cfg, ob.outIDs, ob.latIDs = r, r.cfg, r.stats.outIDs, r.stats.latIDs
	ob.slots = append(ob.slots[:0], p.observed...)
	ob.timed = guard(func() (err error) { ob.start, err = p.host.Now(); return err }) == nil
	return ob
}

// ObserveResponse counts ob's response in the class of its :status
// for each slot its request assigned, and records its latency; aborted
// (the stream ended without response headers) counts wire.ClassAborted and records no
// latency. Counts go to the root's stats, flushed on tick; each latency
// is one host call. A response to a request assigned before the root was
// reconfigured counts at once in the stats of the configuration that
// assigned it. A host failure costs only its sample.
//
//go:noinline
func (p *Plugin) ObserveResponse(ob *Observation, aborted bool) {
	s := &ob.r.stats
	current := ob.r.cfg == ob.cfg && len(s.outcomes) == ob.cfg.nslots
	if !current && len(ob.outIDs) != ob.cfg.nslots {
		return // the stats of the configuration that assigned it were not defined
	}
	class := wire.ClassAborted
	var ms uint64
	timed := false
	if !aborted {
		class = wire.ClassOther
		var status string
		if guard(func() (err error) { status, err = p.host.ResponseStatus(); return err }) == nil {
			class = wire.StatusClass(status)
		}
		var now int64
		if ob.timed && guard(func() (err error) { now, err = p.host.Now(); return err }) == nil {
			timed = true
			if now > ob.start {
				ms = uint64(now-ob.start) / 1e6
			}
		}
	}
	for _, slot := range ob.slots {
		if current {
			s.outcomes[slot][class]++
		} else {
			guard(func() error { return p.host.IncrementMetric(ob.outIDs[slot][class], 1) })
		}
		if timed && (!current || !s.defineFail) {
			guard(func() error { return p.host.RecordMetric(ob.latIDs[slot], ms) })
		}
	}
}

// Observed is the outcome slots the last request assigned (each an
// observed experiment's variation, in Config.Outcomes' order), for a host
// that records outcomes itself (the native module). Valid until the next
// request.
func (p *Plugin) Observed() []int32 { return p.observed }

// CountUnrecorded counts, on root rootID, a request whose observed outcomes
// the host that records them itself could not keep (the native module:
// the stream's C state could not be allocated), in
// wire.MetricOutcomesUnrecorded: the request is served as usual, its outcome is
// not counted. It does nothing for a root without an observed experiment.
func (p *Plugin) CountUnrecorded(rootID uint32) {
	if r := p.roots[rootID]; r != nil && r.stats.hasUnrecorded {
		r.stats.outcomesUnrecorded++
	}
}

// observeSlots lists the outcome slots of e's assignments in p.observed.
//
//go:noinline
func (p *Plugin) observeSlots(cfg *Config, e entry) {
	for j := range e.assignments() {
		i, v := e.at(j)
		if base := cfg.outBase[i]; base >= 0 {
			p.observed = append(p.observed, base+int32(v))
		}
	}
}
