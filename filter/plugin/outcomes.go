package plugin

import "strconv"

// Outcome classes: what became of a request an observed experiment
// assigned, by its response's :status. Their order is the order of each
// variation's counters (OutcomeMetrics) and of the native module's stat ids.
const (
	Class2xx   = iota // :status 200–299
	Class3xx          // 300–399
	Class4xx          // 400–499
	Class5xx          // 500–599
	ClassOther        // any other :status (101 Switching Protocols, say)
	// ClassAborted: the stream ended before response headers reached the
	// filter, which only the downstream side does (the client gave up,
	// reset the stream or closed its connection): Envoy answers every
	// failure between the proxy and the service before the response
	// headers (connection failure, upstream reset, timeout) with a 5xx
	// local reply, which the filter sees as a 5xx.
	ClassAborted
	// NumClasses is the number of classes.
	NumClasses
)

// classNames name the classes in stat names.
var classNames = [NumClasses]string{"2xx", "3xx", "4xx", "5xx", "other", "aborted"}

// RevisionSlots is how many assignment revisions of one experiment have
// outcome stats of their own in a proxy: a revision's stats carry its
// number modulo RevisionSlots (RevisionSlot), so that a proxy defines at
// most RevisionSlots × 7 stats per observed variation however many
// revisions come and go, and allotd tells the revisions it keeps apart as
// long as it keeps fewer (outcomes.MaxRevisions).
const RevisionSlots = 32

// RevisionSlot is the slot of assignment revision rev in outcome stat names.
func RevisionSlot(rev int64) int { return int(uint64(rev) % RevisionSlots) }

// StatusClass is the class of a response whose :status is status.
func StatusClass(status string) int {
	if len(status) != 3 || status[1] < '0' || status[1] > '9' || status[2] < '0' || status[2] > '9' {
		return ClassOther
	}
	switch status[0] {
	case '2':
		return Class2xx
	case '3':
		return Class3xx
	case '4':
		return Class4xx
	case '5':
		return Class5xx
	}
	return ClassOther
}

// OutcomeMetric names the counter of responses of class to requests that
// assignment revision rev of experiment key assigned variation v:
// allot.experiment.<key>.rev.<slot>.variation.<v>.response.<class>, slot
// being RevisionSlot(rev).
func OutcomeMetric(key string, rev int64, v, class int) string {
	return outcomePrefix(key, rev, v) + ".response." + classNames[class]
}

// LatencyMetric names the histogram of the milliseconds from the request
// headers to the response headers of requests that assignment revision
// rev of experiment key assigned variation v:
// allot.experiment.<key>.rev.<slot>.variation.<v>.response_time_ms.
func LatencyMetric(key string, rev int64, v int) string {
	return outcomePrefix(key, rev, v) + ".response_time_ms"
}

func outcomePrefix(key string, rev int64, v int) string {
	return "allot.experiment." + key + ".rev." + strconv.Itoa(RevisionSlot(rev)) + ".variation." + strconv.Itoa(v)
}

// OutcomeStats are the stats of one observed variation (one outcome slot):
// a counter per class and the latency histogram.
type OutcomeStats struct {
	Counters [NumClasses]string
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
			for class := range NumClasses {
				s.Counters[class] = OutcomeMetric(key, c.revs[i], v, class)
			}
			s.Latency = LatencyMetric(key, c.revs[i], v)
			out = append(out, s)
		}
	}
	return out
}

// observation is what a stream of an observed request waits with for its
// response (proxy-wasm: the plugin keeps it; the native module keeps the
// same in C).
type observation struct {
	r   *root
	cfg *Config
	// outIDs and latIDs are the root's stat ids when the request was
	// assigned: a response after the root was reconfigured counts in
	// them, the stats of the revisions that assigned it.
	outIDs [][NumClasses]uint32
	latIDs []uint32
	start  int64 // the host's clock at the request headers, ns
	timed  bool  // start was read
	slots  []int32
}

// observeRequest keeps the outcome slots the request just assigned
// (p.observed) for stream id's response. A failure to read the clock
// costs the request its latency sample only.
//
//go:noinline
func (p *Plugin) observeRequest(id uint32, r *root) {
	var ob *observation
	if n := len(p.obsFree); n > 0 {
		ob, p.obsFree = p.obsFree[n-1], p.obsFree[:n-1]
	} else {
		ob = &observation{}
	}
	ob.r, ob.cfg, ob.outIDs, ob.latIDs = r, r.cfg, r.stats.outIDs, r.stats.latIDs
	ob.slots = append(ob.slots[:0], p.observed...)
	ob.timed = guard(func() (err error) { ob.start, err = p.host.Now(); return err }) == nil
	if p.observing == nil {
		p.observing = map[uint32]*observation{}
	}
	p.observing[id] = ob
}

// observeResponse counts stream id's response in the class of its :status
// for each slot its request assigned, and records its latency; aborted
// (no response headers: from OnDelete) counts ClassAborted and records no
// latency. Counts go to the root's stats, flushed on tick; each latency
// is one host call. A response to a request assigned before the root was
// reconfigured counts at once in the stats of the configuration that
// assigned it. A host failure costs only its sample.
//
//go:noinline
func (p *Plugin) observeResponse(id uint32, aborted bool) {
	ob, ok := p.observing[id]
	if !ok {
		return
	}
	delete(p.observing, id)
	defer func() { p.obsFree = append(p.obsFree, ob) }()
	s := &ob.r.stats
	current := ob.r.cfg == ob.cfg && len(s.outcomes) == ob.cfg.nslots
	if !current && len(ob.outIDs) != ob.cfg.nslots {
		return // the stats of the configuration that assigned it were not defined
	}
	class := ClassAborted
	var ms uint64
	timed := false
	if !aborted {
		class = ClassOther
		var status string
		if guard(func() (err error) { status, err = p.host.ResponseStatus(); return err }) == nil {
			class = StatusClass(status)
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
// MetricOutcomesUnrecorded: the request is served as usual, its outcome is
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

// ClassName is the name of class in stat names ("2xx", …, "aborted").
func ClassName(class int) string { return classNames[class] }

// LatencyBounds are the upper bounds (ms) of the buckets of the
// response_time_ms histogram: Envoy's default histogram buckets, which the
// bootstraps keep (no histogram_bucket_settings). allotd sums every
// proxy's samples into them and drops a histogram with other bounds.
var LatencyBounds = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}
