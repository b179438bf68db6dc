// Package outcomes receives the per-variation outcome stats the proxies'
// filters keep for observed experiments (Envoy's OpenTelemetry stat sink,
// served on the xDS listener) and aggregates them mesh-wide, per experiment,
// per assignment revision and per variation: responses by class and
// latency buckets, since the revision and per minute. Each stat carries
// the revision that assigned its requests (wire.OutcomeMetric), so a
// response counts in that revision however late its proxy flushes it. With
// several allotd replicas, each publishes its figures to records shared
// through the store's cluster (Shared, shared.go; on etcd,
// control-plane/outcomes/etcd) and its reports sum every replica's.
//
// It reads experiments through store.Store and imports, of the control
// plane, experiment, guard and store; of the filter, its wire contract
// (filter/wire: the stat names, classes, latency bounds and namespace). It
// never imports the admin API or the xDS server: allotd's wiring gives it
// what it needs of them as functions and interfaces (Decoder,
// IdentifyFunc, Shared).
package outcomes

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/filter/wire"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// numClasses is the number of outcome classes (2xx, 3xx, 4xx, 5xx, other,
// aborted), in the filter's order.
const numClasses = wire.NumClasses

// latencyClass marks a stat name as a variation's latency histogram.
const latencyClass = -1

// Decoder rebuilds an experiment from its stored document (experiment.FromStore).
type Decoder func(*store.Experiment) (*experimentv1.Experiment, error)

// Option configures an Aggregator.
type Option func(*Aggregator)

// WithLogger sets the logger (nil: discard).
func WithLogger(l *slog.Logger) Option { return func(a *Aggregator) { a.log = l } }

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(a *Aggregator) { a.now = now } }

// WithLists reads the experiments through l, which others following the
// same store share (default: its own).
func WithLists(l *store.Lists) Option { return func(a *Aggregator) { a.lists = l } }

// Aggregator holds the outcomes of the observed experiments that the
// proxies of one allotd report; with a shared store (WithShared) it
// publishes them there and its reports sum every replica's. Its methods
// are safe for concurrent use.
type Aggregator struct {
	st      store.Store
	lists   *store.Lists
	decode  Decoder
	log     *slog.Logger
	now     func() time.Time
	dropped *prometheus.CounterVec
	// received counts the sink's exports and their bytes.
	messages, bytes prometheus.Counter
	reqDesc         *prometheus.Desc

	changes <-chan int64 // the store's watch: a flush re-reads the experiments after a write
	shared  Shared       // the replicas' shared records; nil on one allotd
	// publishing is held by Publish: one at a time.
	publishing sync.Mutex

	// reading is held by the one caller reading the store (TryLock: the
	// others go on with the experiments read last); it guards storeRev
	// and retryAt. The store is never read with mu held, so that a slow
	// store delays no flush, report or scrape.
	reading  sync.Mutex
	readMu   sync.Mutex    // guards readDone
	readDone chan struct{} // closed when the read under way ends; nil when none is
	stale    atomic.Bool   // the store changed since the experiments were read
	watched  atomic.Int64  // the latest store revision a watch reported
	storeRev int64
	retryAt  time.Time // after a failed read, the next read waits until then
	// decoded are the experiments as last decoded, by key, with the
	// store revision of their document (guarded by reading): a read
	// decodes only those that changed since.
	decoded map[string]experiment.Decoded

	mu   sync.Mutex
	exps map[string]*expState // observed experiments under their current revision, by key
	// earlier are the revisions each observed experiment had before,
	// newest first: at most MaxRevisions-1, each for RevisionGrace after
	// it was replaced.
	earlier map[string][]*expState
	names   map[string]series // outcome stat name → series; replaced, never changed
	second  int64             // the Unix second exports counts
	exports map[string]int    // connection (remote address) → its exports in second (MaxExportsPerSecond)
}

// series is one outcome stat: a class counter or (class latencyClass) the
// latency histogram of a variation under one assignment revision.
type series struct {
	key       string
	rev       int64
	variation int
	class     int
}

// expState is an observed experiment's figures under one assignment
// revision.
type expState struct {
	key      string
	revision string // Revision: rev in decimal
	rev      int64
	until    time.Time // when the revision was replaced; zero while it is current
	names    []string  // its outcome stats' names, in the order of series (statNames)
	stored   int64     // the store revision of the document this revision was first read from
	weights  []float64
	// guardrails are the experiment's (Report tests them on total).
	guardrails []*experimentv1.Guardrail
	// def is the experiment as read last (Add: which clusters run it).
	def     *experimentv1.Experiment
	since   time.Time
	total   []tally // per variation, since the revision, counted by this allotd
	minutes [MaxWindowMinutes + 1]minute

	// With a shared store (several replicas): the part of total and of
	// each minute's tallies already in this replica's records (sent,
	// sentMin), those records as the store holds them (own; nil until
	// read), and a commit of them whose outcome is unknown (tried).
	sent    []tally
	sentMin map[int64][]tally
	own     *ownRecords
	tried   *attempt
}

// minute is one minute's tallies (stamp: Unix minute).
type minute struct {
	stamp int64
	vars  []tally
}

// tally is one variation's responses by class and latency histogram.
type tally struct {
	counts  [numClasses]uint64
	buckets []uint64 // samples per bucket of wire.LatencyBounds (not cumulative); none or len(wire.LatencyBounds)+1, the last above every bound
}

// New returns an Aggregator reading experiments from st with decode (and
// again after each write st's Watch reports, until ctx is done) and
// registering its metrics with reg.
func New(ctx context.Context, st store.Store, decode Decoder, reg prometheus.Registerer, opts ...Option) (*Aggregator, error) {
	a := &Aggregator{st: st, decode: decode, now: time.Now, storeRev: -1, changes: st.Watch(ctx),
		exps: map[string]*expState{}, earlier: map[string][]*expState{}, names: map[string]series{}, exports: map[string]int{},
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_outcomes_dropped_total",
			Help: "Data points of outcome stats from proxies dropped on entry, by reason."}, []string{"reason"}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_outcomes_messages_total",
			Help: "Exports received from the proxies' OpenTelemetry stat sinks."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_outcomes_received_bytes_total",
			Help: "Bytes (protobuf) of the exports received from the proxies' OpenTelemetry stat sinks."}),
		reqDesc: prometheus.NewDesc("allot_outcome_requests_total",
			"Responses to requests an observed experiment assigned, reported by the proxies connected to this allotd, by variation and class, since the experiment's current assignment revision or this allotd's start (only the current revision's series are exported; sum over the replicas for the mesh).",
			[]string{"experiment", "revision", "variation", "class"}, nil),
	}
	for _, o := range opts {
		o(a)
	}
	if a.lists == nil {
		a.lists = store.NewLists(st)
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	for _, r := range []string{reasonIdentity, reasonSize, reasonRate, reasonName, reasonOther, reasonCluster, reasonValue} {
		a.dropped.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(a); err != nil {
			return nil, fmt.Errorf("register outcomes metrics: %w", err)
		}
	}
	// The experiments are read before the first export arrives: an export
	// that finds another caller reading them goes on with what was read
	// last, which must not be nothing (its outcomes would be dropped as
	// not Allot's). A store that cannot be read now is read again at the
	// next export after refreshBackoff.
	if err := a.maybeRefresh(ctx, true); err != nil {
		a.log.Warn("outcomes: experiments not read", "error", err)
	}
	go a.follow(ctx, st.Watch(ctx))
	return a, nil
}

// follow re-reads the experiments after each write the store's watch
// reports, until ctx is done: every assignment revision is then known
// while it is current, so that its responses count in it even when no
// proxy flushed before the next write (a revision replaced before allotd
// read it is not kept: its responses are dropped, reason "other_stat").
// It watches the store apart from a.changes, which exports and reports
// drain: each of them still learns of a write itself, and reads the
// experiments or waits for the read under way (awaitRead).
//
// A read under way when the write came may have begun before it: follow
// then waits for that read to end and reads again, until the write is
// read (a failed read is retried at the next write, export or report,
// after refreshBackoff).
func (a *Aggregator) follow(ctx context.Context, changes <-chan int64) {
	for rev := range changes {
		a.see(rev)
		for a.stale.Load() && ctx.Err() == nil {
			if err := a.maybeRefresh(ctx, false); err != nil {
				a.log.Warn("outcomes: experiments not re-read", "error", err)
				break
			}
			if !a.stale.Load() {
				break
			}
			a.readMu.Lock()
			done := a.readDone // nil: none under way (a sweep's look, or the backoff): try again shortly
			a.readMu.Unlock()
			t := time.NewTimer(followRetry)
			select {
			case <-ctx.Done():
			case <-done:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// followRetry is how long follow waits before reading again when no read
// it could wait for is under way.
const followRetry = 10 * time.Millisecond

// Describe implements prometheus.Collector.
func (a *Aggregator) Describe(ch chan<- *prometheus.Desc) {
	a.dropped.Describe(ch)
	ch <- a.messages.Desc()
	ch <- a.bytes.Desc()
	ch <- a.reqDesc
}

// Collect implements prometheus.Collector: the counters of what the sink
// received and dropped, and one
// allot_outcome_requests_total series per observed experiment × variation
// × class, labelled with the current revision (so that a revision's
// counter starting over is a new series, not a reset that rate() mixes).
func (a *Aggregator) Collect(ch chan<- prometheus.Metric) {
	a.dropped.Collect(ch)
	ch <- a.messages
	ch <- a.bytes
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.exps {
		for v, t := range e.total {
			for c := range numClasses {
				ch <- prometheus.MustNewConstMetric(a.reqDesc, prometheus.CounterValue, float64(t.counts[c]),
					e.key, e.revision, strconv.Itoa(v), wire.ClassName(c))
			}
		}
	}
}

// Revision is e's assignment revision as reports name it: its
// assignment_revision in decimal. It grows with each write that changes
// what assigns units (experiment.NextAssignment), a pause and a start
// included: figures from before a rollback are no evidence about the
// experiment an owner acknowledged and started again, so they start over.
func Revision(e *experimentv1.Experiment) string {
	return strconv.FormatInt(e.GetAssignmentRevision(), 10)
}

// refreshBackoff is how long a failed store read is not retried: with
// the store down, flushes count under the experiments read last instead
// of each waiting for the store's timeout.
const refreshBackoff = 5 * time.Second

// maybeRefresh re-reads the observed experiments if the store changed
// since they were read (force: if its revision moved), unless another
// caller is reading them or a read failed less than refreshBackoff ago.
// a.mu must not be held.
func (a *Aggregator) maybeRefresh(ctx context.Context, force bool) error {
	select {
	case rev, ok := <-a.changes: // not at every flush: with 10,000 proxies flushing every 5 s, 2,000 store reads a second
		if ok {
			a.see(rev)
		}
	default:
	}
	a.readMu.Lock()
	if done := a.readDone; done != nil { // another caller is reading, maybe a write just made: wait for it, briefly
		a.readMu.Unlock()
		a.awaitRead(ctx, done)
		return nil
	}
	if !force && !a.stale.Load() {
		a.readMu.Unlock()
		return nil
	}
	done := make(chan struct{})
	a.readDone = done
	a.readMu.Unlock()
	defer func() {
		a.readMu.Lock()
		a.readDone = nil
		a.readMu.Unlock()
		close(done)
	}()
	if !a.reading.TryLock() {
		return nil
	}
	defer a.reading.Unlock()
	if a.now().Before(a.retryAt) {
		return nil
	}
	stale := a.stale.Swap(false) // a change during the read marks it again
	// A forced read (a report, a sweep) asks the store's revision: it must
	// not wait for the watch to report a write just made.
	if err := a.refresh(ctx, stale && !force); err != nil {
		if stale {
			a.stale.Store(true)
		}
		if ctx.Err() == nil { // the caller's own cancellation holds back no one else's read
			a.retryAt = a.now().Add(refreshBackoff)
		}
		return err
	}
	return nil
}

// staleWait bounds how long a caller that finds the experiments being
// re-read after a write waits for the read to end: an export of the
// revision just written then counts, and a slow store delays it no longer.
const staleWait = 100 * time.Millisecond

// awaitRead waits, at most staleWait, for the read of the experiments
// under way to end (done closed).
func (a *Aggregator) awaitRead(ctx context.Context, done <-chan struct{}) {
	t := time.NewTimer(staleWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// see records that a watch of the store reported revision rev: the
// experiments are stale until read as of rev or later.
func (a *Aggregator) see(rev int64) {
	for {
		was := a.watched.Load()
		if rev <= was || a.watched.CompareAndSwap(was, rev) {
			break
		}
	}
	a.stale.Store(true)
}

// refresh re-reads the observed experiments when the store's revision
// moved: as of the revision the store's watch reported when it did
// (stale), through a.lists, which one read after a write serves for every
// follower of the store; after asking the store's revision otherwise.
// a.reading must be held and a.mu not: the store is read and the
// experiments decoded outside a.mu, which is held only to swap the maps;
// only those whose document changed since the last read are decoded
// (a.decoded). An experiment whose assignment revision changed starts over.
func (a *Aggregator) refresh(ctx context.Context, stale bool) error {
	rev := a.watched.Load()
	if !stale || rev <= 0 {
		var err error
		if rev, err = a.st.Revision(ctx); err != nil {
			return fmt.Errorf("read store revision: %w", err)
		}
	}
	if rev == a.storeRev {
		return nil
	}
	list, got, err := a.lists.List(ctx, rev)
	if err != nil {
		return fmt.Errorf("list experiments: %w", err)
	}
	if got < rev { // a member's last state, without a quorum
		return fmt.Errorf("list experiments: %w: the store served revision %d, before %d", store.ErrUnavailable, got, rev)
	}
	if rev = got; rev == a.storeRev {
		return nil
	}
	type observed struct {
		e      *experimentv1.Experiment
		stored int64 // the store revision of its document
	}
	var read []observed
	decoded := make(map[string]experiment.Decoded, len(list))
	for _, se := range list {
		d, ok := a.decoded[se.Key]
		if !ok || d.Revision != se.Revision {
			e, err := a.decode(se)
			if err != nil {
				a.log.Warn("outcomes: stored experiment not decoded", "key", se.Key, "error", err)
				continue
			}
			d = experiment.Decoded{Revision: se.Revision, Experiment: e}
		}
		decoded[se.Key] = d
		if d.Experiment.GetObserve() {
			read = append(read, observed{d.Experiment, se.Revision})
		}
	}
	a.decoded = decoded
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	exps := make(map[string]*expState, len(read))
	earlier := make(map[string][]*expState, len(read))
	names := map[string]series{}
	for _, o := range read {
		key, arev := o.e.GetKey(), o.e.GetAssignmentRevision()
		st, before := a.exps[key], a.earlier[key]
		if st != nil && !proto.Equal(st.def.GetCreateTime(), o.e.GetCreateTime()) {
			// Deleted and created again: revision numbers start over, and
			// nothing of the experiment that had the key is this one's.
			st, before = nil, nil
		}
		if st == nil || st.rev != arev {
			if st != nil {
				st.until = now
				before = append([]*expState{st}, before...)
			}
			st = &expState{key: key, revision: Revision(o.e), rev: arev, stored: o.stored, weights: weights(o.e), since: now,
				total: make([]tally, len(o.e.GetVariations())), sentMin: map[int64][]tally{}}
			st.names = statNames(key, arev, len(st.total))
		}
		st.guardrails = o.e.GetGuardrails() // no assignment field: they may change within a revision
		st.def = o.e
		exps[key] = st
		index(names, st)
		var kept []*expState
		for _, x := range before {
			// A revision's stats share their names with those RevisionSlots
			// revisions apart: the newer keeps them.
			// An earlier revision keeps its own definition as last read
			// while current: its weights and the services it ran on.
			if len(kept) < MaxRevisions-1 && now.Sub(x.until) <= RevisionGrace && x.rev != arev && index(names, x) {
				kept = append(kept, x)
			}
		}
		if len(kept) > 0 {
			earlier[key] = kept
		}
	}
	a.exps, a.earlier, a.names = exps, earlier, names
	a.storeRev = rev
	return nil
}

// statNames are the full Envoy names of the outcome stats of variations
// variations of revision rev of experiment key, in the order index reads
// them: each variation's class counters, then its latency histogram.
func statNames(key string, rev int64, variations int) []string {
	names := make([]string, 0, variations*(numClasses+1))
	for v := range variations {
		for c := range numClasses {
			names = append(names, statName(wire.OutcomeMetric(key, rev, v, c)))
		}
		names = append(names, statName(wire.OutcomeMetric(key, rev, v, wire.Latency)))
	}
	return names
}

// index adds e's stats to names, unless a stat of another revision holds
// one of them already; false then (nothing added).
func index(names map[string]series, e *expState) bool {
	for _, n := range e.names {
		if _, taken := names[n]; taken {
			return false
		}
	}
	for i, n := range e.names {
		v, c := i/(numClasses+1), i%(numClasses+1)
		if c == numClasses {
			c = latencyClass
		}
		names[n] = series{e.key, e.rev, v, c}
	}
	return true
}

// state is the figures of s's revision; nil if it is not kept.
func (a *Aggregator) state(s series) *expState {
	if e := a.exps[s.key]; e != nil && e.rev == s.rev {
		return e
	}
	for _, e := range a.earlier[s.key] {
		if e.rev == s.rev {
			return e
		}
	}
	return nil
}

// statName is the full Envoy name of a filter stat, as the sink sends it.
func statName(metric string) string { return wire.StatName(metric) }

// weights are e's variation weights, equal when omitted.
func weights(e *experimentv1.Experiment) []float64 {
	if w := e.GetWeights(); len(w) == len(e.GetVariations()) {
		return slices.Clone(w)
	}
	n := len(e.GetVariations())
	w := make([]float64, n)
	for i := range w {
		w[i] = 1 / float64(n)
	}
	return w
}

// admit counts an export over the connection from addr against
// MaxExportsPerSecond; false when it is over.
func (a *Aggregator) admit(addr string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sec := a.now().Unix(); sec != a.second {
		a.second = sec
		clear(a.exports)
	}
	n := a.exports[addr]
	if n >= MaxExportsPerSecond {
		return false
	}
	a.exports[addr] = n + 1
	return true
}

// Add takes one export of the proxy of node, of cluster. Sums (counters)
// and histograms must be deltas since the previous flush (the sink's
// report_counters_as_deltas and report_histograms_as_deltas): they are
// summed as they come, so that a restarted proxy (its stats start over)
// needs nothing. Each counts in the assignment revision its name carries,
// the current one or an earlier one still kept, whichever configuration
// the proxy runs now. Metrics that are not outcome stats of a kept
// revision of an observed experiment, or are over a bound, are dropped and
// counted.
func (a *Aggregator) Add(ctx context.Context, node, cluster string, ms []*metricsv1.Metric) {
	// A store that cannot be read leaves the experiments as they were read
	// last: the flush still counts, and a flush after refreshBackoff tries
	// again.
	if err := a.maybeRefresh(ctx, false); err != nil {
		a.log.Warn("outcomes: experiments not re-read", "error", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	drop := map[string]float64{}
	defer func() {
		for r, n := range drop {
			a.dropped.WithLabelValues(r).Add(n)
		}
	}()
	now := a.now()
	seen := make(map[series]bool, len(ms))
	for _, m := range ms {
		name := m.GetName()
		if len(name) > MaxNameBytes {
			drop[reasonName] += float64(points(m))
			continue
		}
		s, ok := a.names[name]
		if !ok {
			drop[reasonOther] += float64(points(m))
			continue
		}
		e := a.state(s)
		if !e.appliesTo(cluster) {
			// A proxy counts only for the experiments its cluster runs:
			// no proxy can weigh on another team's experiment.
			drop[reasonCluster] += float64(points(m))
			continue
		}
		if seen[s] {
			drop[reasonValue] += float64(points(m)) // one delta per series and export
			continue
		}
		seen[s] = true
		if s.class == latencyClass {
			if !addHistogram(e, s.variation, m.GetHistogram(), now) {
				drop[reasonValue] += float64(points(m))
			}
			continue
		}
		sum, ok := deltaSum(m.GetSum())
		if !ok {
			drop[reasonValue] += float64(points(m))
			continue
		}
		if sum > 0 {
			e.total[s.variation].counts[s.class] += sum
			e.minute(now)[s.variation].counts[s.class] += sum
		}
	}
}

// appliesTo reports whether the proxies of cluster run e.
func (e *expState) appliesTo(cluster string) bool { return experiment.AppliesTo(e.def, cluster) }

// deltaSum is the total of a monotonic delta sum's data points; false if s
// is none, or a value is out of range.
func deltaSum(s *metricsv1.Sum) (uint64, bool) {
	if s == nil || !s.GetIsMonotonic() || s.GetAggregationTemporality() != metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
		return 0, false
	}
	var sum uint64
	for _, p := range s.GetDataPoints() {
		v := p.GetAsDouble()
		if _, isInt := p.GetValue().(*metricsv1.NumberDataPoint_AsInt); isInt {
			v = float64(p.GetAsInt())
		}
		d, ok := count(v)
		if !ok || sum+d > MaxDelta {
			return 0, false
		}
		sum += d
	}
	return sum, true
}

// count is a counter delta or bucket count as a whole number, if it is one
// within MaxDelta.
func count(v float64) (uint64, bool) {
	if math.IsNaN(v) || v < 0 || v > MaxDelta || v != math.Trunc(v) {
		return 0, false
	}
	return uint64(v), true
}

// addHistogram adds one flush's latency histogram (the samples since the
// previous flush, in disjoint buckets over wire.LatencyBounds and one above
// them) to variation v; false when it is none, not a delta, malformed, or
// its bounds are not wire.LatencyBounds.
func addHistogram(e *expState, v int, h *metricsv1.Histogram, now time.Time) bool {
	if h == nil || h.GetAggregationTemporality() != metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
		return false
	}
	sum := make([]uint64, len(wire.LatencyBounds)+1)
	var total uint64
	for _, p := range h.GetDataPoints() {
		if !slices.Equal(p.GetExplicitBounds(), wire.LatencyBounds) || len(p.GetBucketCounts()) != len(sum) {
			return false
		}
		var n uint64
		for i, c := range p.GetBucketCounts() {
			if c > MaxDelta {
				return false
			}
			sum[i] += c
			n += c
		}
		if n != p.GetCount() || total+n > MaxDelta {
			return false
		}
		total += n
	}
	if total == 0 {
		return true
	}
	t, m := &e.total[v], &e.minute(now)[v]
	grow(t, len(sum))
	grow(m, len(sum))
	for i, c := range sum {
		t.buckets[i] += c
		m.buckets[i] += c
	}
	return true
}

func grow(t *tally, n int) {
	if len(t.buckets) < n {
		t.buckets = append(t.buckets, make([]uint64, n-len(t.buckets))...)
	}
}

// minute returns the tallies of the minute of now, emptied if the slot
// held an older minute.
func (e *expState) minute(now time.Time) []tally {
	stamp := now.Unix() / 60
	m := &e.minutes[stamp%int64(len(e.minutes))]
	if m.stamp != stamp || m.vars == nil {
		*m = minute{stamp: stamp, vars: make([]tally, len(e.total))}
	}
	return m.vars
}
