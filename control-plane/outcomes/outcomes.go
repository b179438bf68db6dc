// Package outcomes receives the per-variation outcome stats the proxies'
// filters keep for observed experiments (Envoy's metrics_service stat sink,
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
	clientmodel "github.com/prometheus/client_model/go"
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

// AppliedFunc reports whether the proxy of node id and cluster has applied
// (ACKed) the configuration its cluster should run now.
type AppliedFunc func(node, cluster string) bool

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
	applied AppliedFunc
	log     *slog.Logger
	now     func() time.Time
	dropped *prometheus.CounterVec
	// received counts the sink's messages and their bytes (the cost of the
	// sink: Envoy sends every stat in use at each flush).
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
	proxies map[string]*proxyState
	streams int // open metrics streams, of every proxy
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
	since    time.Time
	total    []tally // per variation, since the revision, counted by this allotd
	minutes  [MaxWindowMinutes + 1]minute

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
	buckets []uint64 // samples per bucket of LatencyBounds (not cumulative); none or len(LatencyBounds)+1, the last above every bound
}

// proxyState is what allotd keeps of one reporting proxy: its open
// metrics streams and the series it reported (bounded by
// MaxSeriesPerProxy).
type proxyState struct {
	streams int
	series  map[series]struct{} // (key, variation, latencyClass) of each reported variation
}

// New returns an Aggregator reading experiments from st with decode (and
// again after each write st's Watch reports, until ctx is done), asking
// applied whether a reporting proxy runs the current configuration, and
// registering its metrics with reg.
func New(ctx context.Context, st store.Store, decode Decoder, applied AppliedFunc, reg prometheus.Registerer, opts ...Option) (*Aggregator, error) {
	a := &Aggregator{st: st, decode: decode, applied: applied, now: time.Now, storeRev: -1, changes: st.Watch(ctx),
		exps: map[string]*expState{}, names: map[string]series{}, proxies: map[string]*proxyState{},
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_outcomes_dropped_total",
			Help: "Outcome stats (metric families) from proxies dropped on entry, by reason."}, []string{"reason"}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_outcomes_messages_total",
			Help: "Messages received from the proxies' metrics_service stat sinks."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_outcomes_received_bytes_total",
			Help: "Bytes (protobuf) of the messages received from the proxies' metrics_service stat sinks."}),
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
	for _, r := range []string{reasonIdentity, reasonName, reasonOther, reasonNotApplied, reasonSeries, reasonProxies, reasonStreams, reasonValue} {
		a.dropped.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(a); err != nil {
			return nil, fmt.Errorf("register outcomes metrics: %w", err)
		}
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
// without observe).
func Revision(e *experimentv1.Experiment) string {
	d := experiment.Definition(e)
	d.Observe = false
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil { // a message built from a decoded one always marshals
		panic(fmt.Sprintf("marshal definition: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
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
// An experiment whose assignment revision changed starts over, and the
// proxies' series of experiments and revisions no longer current are
// forgotten (MaxSeriesPerProxy bounds the live ones).
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
		exps[key] = st
	}
	gone := map[string]bool{} // experiments no longer observed, or at a new revision
	for key, old := range a.exps {
		if exps[key] != old {
			gone[key] = true
		}
	}
	if len(gone) > 0 {
		for _, p := range a.proxies {
			for s := range p.series {
				if gone[s.key] {
					delete(p.series, s)
				}
			}
		}
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

// open registers a metrics stream of node; the reason to refuse it
// (counted in allot_outcomes_dropped_total) when node has
// MaxStreamsPerProxy open, MaxStreams are open or MaxProxies are
// reporting.
func (a *Aggregator) open(node string) (refused string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.streams >= MaxStreams {
		return reasonStreams
	}
	p := a.proxies[node]
	if p == nil {
		if len(a.proxies) >= MaxProxies && !a.evictLocked() {
			return reasonProxies
		}
		p = &proxyState{series: map[series]struct{}{}}
		a.proxies[node] = p
	}
	if p.streams >= MaxStreamsPerProxy {
		return reasonStreams
	}
	p.streams++
	a.streams++
	return ""
}

// close ends a metrics stream of node. The proxy's histograms stay, so
// that a reconnecting proxy continues them, until a new proxy needs room.
func (a *Aggregator) close(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.proxies[node]; p != nil {
		p.streams--
		a.streams--
	}
}

// evictLocked forgets one proxy without a stream; false if every proxy
// has one.
func (a *Aggregator) evictLocked() bool {
	for n, p := range a.proxies {
		if p.streams <= 0 {
			delete(a.proxies, n)
			return true
		}
	}
	return false
}

// Add takes one flush of the proxy of node and cluster. Counters are
// deltas since the previous flush (report_counters_as_deltas), and so are
// histograms (Envoy's sink sends a histogram's interval statistics): both
// are summed as they come, so that a restarted proxy (its stats start
// over) needs nothing. Families that are not outcome stats of an observed
// experiment, or are over a bound, are dropped and counted.
func (a *Aggregator) Add(ctx context.Context, node, cluster string, fams []*clientmodel.MetricFamily) {
	// A store that cannot be read leaves the experiments as they were read
	// last: the flush still counts, and a flush after refreshBackoff tries
	// again.
	if err := a.maybeRefresh(ctx, false); err != nil {
		a.log.Warn("outcomes: experiments not re-read", "error", err)
	}
	// Whether the proxy applied its configuration is asked outside a.mu
	// (it reads the xDS server's tracking), and only if the flush holds an
	// outcome stat.
	a.mu.Lock()
	names := a.names
	a.mu.Unlock()
	applied := false
	for _, f := range fams {
		if _, ok := names[f.GetName()]; ok && len(f.GetName()) <= MaxNameBytes {
			applied = a.applied(node, cluster)
			break
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	drop := map[string]float64{}
	defer func() {
		for r, n := range drop {
			a.dropped.WithLabelValues(r).Add(n)
		}
	}()
	p := a.proxies[node]
	if p == nil {
		drop[reasonProxies] += float64(len(fams))
		return
	}
	now := a.now()
	for _, f := range fams {
		name := f.GetName()
		if len(name) > MaxNameBytes {
			drop[reasonName]++
			continue
		}
		s, ok := a.names[name]
		if !ok {
			drop[reasonOther]++
			continue
		}
		if !applied {
			drop[reasonNotApplied]++
			continue
		}
		e := a.exps[s.key]
		v := series{s.key, s.variation, latencyClass}
		if _, seen := p.series[v]; !seen {
			if len(p.series) >= MaxSeriesPerProxy {
				drop[reasonSeries]++
				continue
			}
			p.series[v] = struct{}{}
		}
		if s.class == latencyClass {
			if !addHistogram(e, s.variation, f, now) {
				drop[reasonValue]++
			}
			continue
		}
		var sum uint64
		for _, m := range f.GetMetric() {
			d, ok := count(m.GetCounter().GetValue())
			if !ok {
				drop[reasonValue]++
				sum = 0
				break
			}
			sum += d
		}
		if sum > 0 {
			e.total[s.variation].counts[s.class] += sum
			e.minute(now)[s.variation].counts[s.class] += sum
		}
	}
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
// previous flush, in cumulative buckets) to variation v; false when it is
// malformed or its bounds are not LatencyBounds.
func addHistogram(e *expState, v int, f *clientmodel.MetricFamily, now time.Time) bool {
	ms := f.GetMetric()
	if len(ms) != 1 || ms[0].GetHistogram() == nil {
		return false
	}
	h := ms[0].GetHistogram()
	if len(h.GetBucket()) != len(LatencyBounds) {
		return false
	}
	cum := make([]uint64, 0, len(LatencyBounds)+1)
	for i, b := range h.GetBucket() {
		c, ok := count(float64(b.GetCumulativeCount()))
		if !ok || b.GetUpperBound() != LatencyBounds[i] || (len(cum) > 0 && c < cum[len(cum)-1]) {
			return false
		}
		cum = append(cum, c)
	}
	total, ok := count(float64(h.GetSampleCount()))
	if !ok || total < cum[len(cum)-1] {
		return false
	}
	cum = append(cum, total)
	if total == 0 {
		return true
	}
	t, m := &e.total[v], &e.minute(now)[v]
	grow(t, len(cum))
	grow(m, len(cum))
	var below uint64
	for i, c := range cum {
		t.buckets[i] += c - below
		m.buckets[i] += c - below
		below = c
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
