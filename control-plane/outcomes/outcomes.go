// Package outcomes receives the per-variation outcome stats the proxies'
// filters keep for observed experiments (Envoy's OpenTelemetry stat sink,
// served on the xDS listener) and aggregates them mesh-wide, per experiment,
// per revision of its assignment fields and per variation: responses by
// class and latency buckets, since the revision and per minute. With
// several allotd replicas, each publishes its figures to records shared
// through the store's cluster (Shared, shared.go) and its reports sum
// every replica's. It reads experiments through store.Store and never
// imports the admin API, the xDS server or another sibling; allotd's
// wiring gives it what it needs of them as functions.
package outcomes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/plugin"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// numClasses is the number of outcome classes (2xx, 3xx, 4xx, 5xx, other,
// reset), in the filter's order.
const numClasses = plugin.NumClasses

// latencyClass marks a stat name as a variation's latency histogram.
const latencyClass = -1

// Decoder rebuilds an experiment from its stored document (admin.FromStore).
type Decoder func(*store.Experiment) (*experimentv1.Experiment, error)

// Option configures an Aggregator.
type Option func(*Aggregator)

// WithLogger sets the logger (nil: discard).
func WithLogger(l *slog.Logger) Option { return func(a *Aggregator) { a.log = l } }

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(a *Aggregator) { a.now = now } }

// Aggregator holds the outcomes of the observed experiments that the
// proxies of one allotd report; with a shared store (WithShared) it
// publishes them there and its reports sum every replica's. Its methods
// are safe for concurrent use.
type Aggregator struct {
	st      store.Store
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
	stale    atomic.Bool // the store changed since the experiments were read
	storeRev int64
	retryAt  time.Time // after a failed read, the next read waits until then

	mu      sync.Mutex
	exps    map[string]*expState // observed experiments, by key
	names   map[string]series    // outcome stat name → series; replaced, never changed
	second  int64                // the Unix second exports counts
	exports map[string]int       // connection (remote address) → its exports in second (MaxExportsPerSecond)
}

// series is one outcome stat: a class counter or (class latencyClass) the
// latency histogram of a variation.
type series struct {
	key       string
	variation int
	class     int
}

// expState is an observed experiment's figures under its current
// assignment revision.
type expState struct {
	key      string
	revision string
	stored   int64 // the store revision of the document this revision was first read from
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
	buckets []uint64 // samples per bucket of plugin.LatencyBounds (not cumulative); none or len(plugin.LatencyBounds)+1, the last above every bound
}

// New returns an Aggregator reading experiments from st with decode (and
// again after each write st's Watch reports, until ctx is done) and
// registering its metrics with reg.
func New(ctx context.Context, st store.Store, decode Decoder, reg prometheus.Registerer, opts ...Option) (*Aggregator, error) {
	a := &Aggregator{st: st, decode: decode, now: time.Now, storeRev: -1, changes: st.Watch(ctx),
		exps: map[string]*expState{}, names: map[string]series{}, exports: map[string]int{},
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
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	for _, r := range []string{reasonIdentity, reasonSize, reasonRate, reasonName, reasonOther, reasonNotApplied, reasonCluster, reasonValue} {
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
	return a, nil
}

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
					e.key, e.revision, strconv.Itoa(v), plugin.ClassName(c))
			}
		}
	}
}

// Revision is the assignment revision of e: a digest of what decides which
// unit gets which variation (the evaluated fields, experiment.Definition,
// without observe) and of the time of its rollback, if a guardrail rolled
// it back: figures from before a rollback are no evidence about the
// experiment an owner acknowledged and started again, so they start over.
func Revision(e *experimentv1.Experiment) string {
	d := experiment.Definition(e)
	d.Observe = false
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil { // a message built from a decoded one always marshals
		panic(fmt.Sprintf("marshal definition: %v", err))
	}
	h := sha256.New()
	h.Write(b)
	if t := e.GetRollback().GetTime(); t != nil {
		fmt.Fprintf(h, "\x00rollback %d.%09d", t.GetSeconds(), t.GetNanos())
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
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
	case _, ok := <-a.changes: // not at every flush: with 10,000 proxies flushing every 5 s, 2,000 store reads a second
		if ok {
			a.stale.Store(true)
		}
	default:
	}
	if !force && !a.stale.Load() {
		return nil
	}
	if !a.reading.TryLock() {
		return nil
	}
	defer a.reading.Unlock()
	if a.now().Before(a.retryAt) {
		return nil
	}
	stale := a.stale.Swap(false) // a change during the read marks it again
	if err := a.refresh(ctx); err != nil {
		if stale {
			a.stale.Store(true)
		}
		a.retryAt = a.now().Add(refreshBackoff)
		return err
	}
	return nil
}

// refresh re-reads the observed experiments when the store's revision
// moved; a.reading must be held and a.mu not: the store is read and the
// experiments decoded outside a.mu, which is held only to swap the maps.
// An experiment whose assignment revision changed starts over.
func (a *Aggregator) refresh(ctx context.Context) error {
	rev, err := a.st.Revision(ctx)
	if err != nil {
		return fmt.Errorf("read store revision: %w", err)
	}
	if rev == a.storeRev {
		return nil
	}
	list, rev, err := a.st.List(ctx)
	if err != nil {
		return fmt.Errorf("list experiments: %w", err)
	}
	type observed struct {
		e        *experimentv1.Experiment
		revision string
		stored   int64 // the store revision of its document
	}
	var read []observed
	names := map[string]series{}
	for _, se := range list {
		e, err := a.decode(se)
		if err != nil {
			a.log.Warn("outcomes: stored experiment not decoded", "key", se.Key, "error", err)
			continue
		}
		if !e.GetObserve() {
			continue
		}
		read = append(read, observed{e, Revision(e), se.Revision})
		for v := range len(e.GetVariations()) {
			for c := range numClasses {
				names[statName(plugin.OutcomeMetric(e.GetKey(), v, c))] = series{e.GetKey(), v, c}
			}
			names[statName(plugin.LatencyMetric(e.GetKey(), v))] = series{e.GetKey(), v, latencyClass}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	exps := make(map[string]*expState, len(read))
	for _, o := range read {
		key := o.e.GetKey()
		st := a.exps[key]
		if st == nil || st.revision != o.revision {
			st = &expState{key: key, revision: o.revision, stored: o.stored, weights: weights(o.e), since: a.now(),
				total: make([]tally, len(o.e.GetVariations())), sentMin: map[int64][]tally{}}
		}
		st.guardrails = o.e.GetGuardrails() // no assignment field: they may change within a revision
		st.def = o.e
		exps[key] = st
	}
	a.exps, a.names = exps, names
	a.storeRev = rev
	return nil
}

// statName is the full Envoy name of a filter stat, as the sink sends it.
func statName(metric string) string { return translate.NativeMetricsNamespace + "." + metric }

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

// Add takes one export of the proxy of node, which has applied its
// cluster's current configuration or not. Sums (counters) and histograms
// must be deltas since the previous flush (the sink's
// report_counters_as_deltas and report_histograms_as_deltas): they are
// summed as they come, so that a restarted proxy (its stats start over)
// needs nothing. Metrics that are not outcome stats of an observed
// experiment, or are over a bound, are dropped and counted.
func (a *Aggregator) Add(ctx context.Context, node, cluster string, applied bool, ms []*metricsv1.Metric) {
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
		if !applied {
			drop[reasonNotApplied] += float64(points(m))
			continue
		}
		e := a.exps[s.key]
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
// previous flush, in disjoint buckets over plugin.LatencyBounds and one above
// them) to variation v; false when it is none, not a delta, malformed, or
// its bounds are not plugin.LatencyBounds.
func addHistogram(e *expState, v int, h *metricsv1.Histogram, now time.Time) bool {
	if h == nil || h.GetAggregationTemporality() != metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
		return false
	}
	sum := make([]uint64, len(plugin.LatencyBounds)+1)
	var total uint64
	for _, p := range h.GetDataPoints() {
		if !slices.Equal(p.GetExplicitBounds(), plugin.LatencyBounds) || len(p.GetBucketCounts()) != len(sum) {
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
