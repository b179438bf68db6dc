package outcomes

import (
	"context"
	"fmt"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientmodel "github.com/prometheus/client_model/go"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// fixture is an Aggregator over a real bbolt store.
type fixture struct {
	st    store.Store
	a     *Aggregator
	clock *harness.Clock
}

func newFixture(t testing.TB, specs ...string) *fixture {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{st: db, clock: harness.NewClock(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))}
	for _, s := range specs {
		if _, err := db.Create(context.Background(), &store.Experiment{Key: specKey(s), Spec: []byte(s)}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	f.a, err = New(t.Context(), db, experiment.FromStore, prometheus.NewRegistry(), WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// specKey is the key of an experiment's JSON document.
func specKey(spec string) string {
	key := spec[strings.Index(spec, `"key":"`)+7:]
	return key[:strings.Index(key, `"`)]
}

const checkout = `{"key":"checkout","variations":["a","b"],"weights":[0.5,0.5],"observe":true,"assignmentRevision":1}`

// counter is one flush's delta of a counter, as Envoy's OpenTelemetry
// sink exports it (a monotonic delta sum).
func counter(name string, v float64) *metricsv1.Metric {
	dp := &metricsv1.NumberDataPoint{Value: &metricsv1.NumberDataPoint_AsDouble{AsDouble: v}}
	if v == float64(int64(v)) && v >= 0 {
		dp.Value = &metricsv1.NumberDataPoint_AsInt{AsInt: int64(v)}
	}
	return &metricsv1.Metric{Name: name, Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{IsMonotonic: true,
		AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
		DataPoints:             []*metricsv1.NumberDataPoint{dp}}}}
}

// histogram is one flush's latency histogram as the sink exports it: the
// samples since the previous flush in disjoint buckets over wire.LatencyBounds
// (and one above), with the counts in the buckets of 10, 100 and 250 ms.
func histogram(name string, perBucket ...uint64) *metricsv1.Metric {
	p := &metricsv1.HistogramDataPoint{ExplicitBounds: slices.Clone(wire.LatencyBounds), BucketCounts: make([]uint64, len(wire.LatencyBounds)+1)}
	for i, b := range wire.LatencyBounds {
		switch b {
		case 10:
			p.BucketCounts[i] = perBucket[0]
		case 100:
			p.BucketCounts[i] = perBucket[1]
		case 250:
			p.BucketCounts[i] = perBucket[2]
		}
	}
	p.Count = perBucket[0] + perBucket[1] + perBucket[2]
	return &metricsv1.Metric{Name: name, Data: &metricsv1.Metric_Histogram{Histogram: &metricsv1.Histogram{
		AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
		DataPoints:             []*metricsv1.HistogramDataPoint{p}}}}
}

// name is the stat of class of checkout's variation v under assignment
// revision 1 (nameAt: rev).
func name(v int, class string) string { return nameAt(1, v, class) }

func nameAt(rev int64, v int, class string) string {
	for c := range numClasses {
		if wire.ClassName(c) == class {
			return "wasmcustom." + wire.OutcomeMetric("checkout", rev, v, c)
		}
	}
	panic("no class " + class)
}

// latency is the latency histogram of checkout's variation v under
// assignment revision 1 (latencyAt: rev).
func latency(v int) string { return latencyAt(1, v) }

func latencyAt(rev int64, v int) string {
	return "wasmcustom." + wire.OutcomeMetric("checkout", rev, v, wire.Latency)
}

// updateSpec stores spec as the checkout experiment's new definition.
func updateSpec(t *testing.T, st store.Store, spec string) {
	t.Helper()
	ctx := context.Background()
	cur, err := st.Get(ctx, "checkout")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec = []byte(spec)
	if _, err := st.Update(ctx, cur, cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) add(t *testing.T, node string, ms ...*metricsv1.Metric) {
	t.Helper()
	f.a.Add(context.Background(), node, "", ms)
}

func (f *fixture) report(t *testing.T, key string, minutes int) *adminv1.Outcomes {
	t.Helper()
	r, err := f.a.Report(context.Background(), key, minutes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTwoProxiesSummed(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 30), counter(name(1, "5xx"), 10), histogram(latency(0), 20, 10, 0))
	f.add(t, "p2", counter(name(0, "2xx"), 20), counter(name(1, "2xx"), 30), counter(name(1, "aborted"), 10), histogram(latency(0), 10, 5, 5))
	f.add(t, "p1", counter(name(0, "2xx"), 10), histogram(latency(0), 5, 5, 0))

	r := f.report(t, "checkout", 0)
	for _, vs := range [][]*adminv1.VariationOutcomes{r.Window, r.Total} {
		if vs[0].Requests != 60 || vs[1].Requests != 50 {
			t.Errorf("requests %d, %d, want 60, 50", vs[0].Requests, vs[1].Requests)
		}
		if vs[1].ErrorRate != 0.25 || vs[0].ErrorRate != 0 || vs[1].Aborted != 10 {
			t.Errorf("error rates %v, %v, aborted %d, want 0, 0.25 (10 5xx of 40 responses: the 10 aborted are none), 10",
				vs[0].ErrorRate, vs[1].ErrorRate, vs[1].Aborted)
		}
		if vs[0].Share != 60.0/110 || vs[0].Weight != 0.5 {
			t.Errorf("share %v weight %v", vs[0].Share, vs[0].Weight)
		}
		if vs[1].Responses["aborted"] != 10 || vs[1].Responses["5xx"] != 10 {
			t.Errorf("responses %v", vs[1].Responses)
		}
		// 35 ≤ 10 ms, 20 in (10, 100], 5 in (100, 250]: 60 timed.
		q := vs[0].LatencyMs
		if q == nil || q.P50 > 10 || q.P95 <= 100 || q.P95 > 250 || q.P99 <= q.P95 || q.P99 > 250 {
			t.Errorf("latency %+v, want p50 ≤ 10, p95 < p99 in (100, 250]", q)
		}
	}
	if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reasonValue)); got != 0 {
		t.Errorf("dropped %v", got)
	}
}

// TestFirstExportsCounted: the experiments are read when the Aggregator
// starts, so an export that arrives while another caller is reading them
// (the first exports of a mesh arrive together) counts.
func TestFirstExportsCounted(t *testing.T) {
	f := newFixture(t, checkout)
	f.a.reading.Lock() // another export is reading the experiments
	f.add(t, "p1", counter(name(0, "2xx"), 3))
	f.a.reading.Unlock()
	if got := f.report(t, "checkout", 0).Total[0].Requests; got != 3 {
		t.Errorf("requests %d, want 3", got)
	}
}

func TestRestartDoesNotDoubleCount(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 10), histogram(latency(0), 10, 0, 0))
	f.add(t, "p1", counter(name(0, "2xx"), 5), histogram(latency(0), 5, 0, 0))
	f.add(t, "p1", counter(name(0, "2xx"), 0), histogram(latency(0), 0, 0, 0)) // an idle flush
	// The restarted Envoy's stats start over, and so do its deltas.
	f.add(t, "p1", counter(name(0, "2xx"), 4), histogram(latency(0), 4, 0, 0))
	f.add(t, "p1", counter(name(0, "2xx"), 1), histogram(latency(0), 1, 0, 0))
	r := f.report(t, "checkout", 0)
	if got := r.Total[0].Requests; got != 20 {
		t.Errorf("requests %d, want 20", got)
	}
	if got := r.Total[0].Timed; got != 20 {
		t.Errorf("timed %d, want 20", got)
	}
}

func TestOverBoundsDropped(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1",
		counter(strings.Repeat("x", MaxNameBytes+1), 1),
		counter("cluster.upstream_rq_total", 1),
		counter("wasmcustom."+wire.OutcomeMetric("other", 1, 0, wire.Class2xx), 1), // not observed
		counter(nameAt(2, 0, "2xx"), 1),                                            // a revision not (yet) stored
		counter(name(0, "2xx"), -1),
		counter(name(0, "4xx"), 1.5),
		counter(name(0, "3xx"), 2))
	// Histograms: bounds other than wire.LatencyBounds, a count other than the
	// buckets' sum, too many buckets or a cumulative one are refused.
	other := histogram(latency(0), 1, 0, 0)
	other.GetHistogram().DataPoints[0].ExplicitBounds[0] = 5
	down := histogram(latency(0), 2, 0, 0)
	down.GetHistogram().DataPoints[0].Count = 1
	many := histogram(latency(0), 1, 0, 0)
	many.GetHistogram().DataPoints[0].BucketCounts = append(many.GetHistogram().DataPoints[0].BucketCounts, 1)
	cumulative := histogram(latency(0), 1, 0, 0)
	cumulative.GetHistogram().AggregationTemporality = metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	f.add(t, "p1", histogram(latency(0), 1, 1, 0), other, down, many, cumulative)
	for reason, want := range map[string]float64{reasonName: 1, reasonOther: 3, reasonValue: 6} {
		if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reason)); got != want {
			t.Errorf("dropped{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if r := f.report(t, "checkout", 0); r.Total[0].Requests != 2 || r.Total[0].Timed != 2 {
		t.Errorf("requests %d, timed %d, want 2 (the 3xx), 2 (the first histogram)", r.Total[0].Requests, r.Total[0].Timed)
	}

	// A cumulative counter is refused too.
	c := counter(name(0, "2xx"), 1)
	c.GetSum().AggregationTemporality = metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	f.add(t, "p1", c)
	if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reasonValue)); got != 7 {
		t.Errorf("dropped{reason=value} = %v after a cumulative sum, want 7", got)
	}
}

func TestRevisionChangeStartsNewWindow(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 10))
	r1 := f.report(t, "checkout", 0)
	ctx := context.Background()
	cur, _ := f.st.Get(ctx, "checkout")

	// A description is no assignment field: same revision, figures kept.
	cur.Spec = []byte(`{"key":"checkout","variations":["a","b"],"weights":[0.5,0.5],"observe":true,"assignmentRevision":1,"description":"x"}`)
	cur, err := f.st.Update(ctx, cur, cur.Revision, "test")
	if err != nil {
		t.Fatal(err)
	}
	if r := f.report(t, "checkout", 0); r.Revision != r1.Revision || r.Total[0].Requests != 10 {
		t.Fatalf("after a description change: revision %s (was %s), requests %d", r.Revision, r1.Revision, r.Total[0].Requests)
	}

	// New weights: a new revision, counted from zero. A flush of the old
	// revision's stats after it (a proxy late to apply it, or requests it
	// assigned before) still counts in the old revision, shown as earlier.
	cur.Spec = []byte(`{"key":"checkout","variations":["a","b"],"weights":[0.1,0.9],"observe":true,"assignmentRevision":2}`)
	if _, err := f.st.Update(ctx, cur, cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
	f.add(t, "p1", counter(nameAt(2, 1, "2xx"), 3), counter(name(0, "5xx"), 4))
	r2 := f.report(t, "checkout", 0)
	if r2.Revision != "2" || r1.Revision != "1" {
		t.Fatalf("revisions %s then %s, want 1 then 2", r1.Revision, r2.Revision)
	}
	if r2.Total[0].Requests != 0 || r2.Total[1].Requests != 3 || r2.Window[0].Requests != 0 || r2.Total[1].Weight != 0.9 {
		t.Errorf("after new weights: %+v", r2.Total)
	}
	if len(r2.Earlier) != 1 || r2.Earlier[0].Revision != "1" || r2.Earlier[0].Total[0].Requests != 14 || r2.Earlier[0].Total[0].ErrorRate != 4.0/14 {
		t.Errorf("earlier revisions %v, want revision 1 with its 10 requests and the 4 flushed late", r2.Earlier)
	}
}

// TestEarlierRevisionsBounded: at most MaxRevisions-1 earlier revisions
// are kept, each for RevisionGrace; a flush of one no longer kept is
// dropped, and a revision RevisionSlots later takes over the stat names
// it shares with an earlier one.
func TestEarlierRevisionsBounded(t *testing.T) {
	f := newFixture(t, checkout)
	spec := func(rev int) string {
		return fmt.Sprintf(`{"key":"checkout","variations":["a","b"],"weights":[0.5,0.5],"observe":true,"assignmentRevision":%d,"seed":"s%d"}`, rev, rev)
	}
	for rev := 2; rev <= MaxRevisions+2; rev++ {
		updateSpec(t, f.st, spec(rev))
		f.report(t, "checkout", 0)
	}
	r := f.report(t, "checkout", 0)
	if len(r.Earlier) != MaxRevisions-1 || r.Earlier[0].Revision != strconv.Itoa(MaxRevisions+1) || r.Earlier[MaxRevisions-2].Revision != "3" {
		t.Fatalf("earlier revisions %d (%v), want %d to 3", len(r.Earlier), r.Earlier, MaxRevisions+1)
	}
	f.add(t, "p1", counter(nameAt(2, 0, "2xx"), 1), counter(nameAt(3, 0, "2xx"), 1))
	if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reasonOther)); got != 1 {
		t.Errorf("dropped{other_stat} = %v, want 1 (revision 2, no longer kept)", got)
	}
	if r := f.report(t, "checkout", 0); r.Earlier[MaxRevisions-2].Total[0].Requests != 1 {
		t.Errorf("revision 3: %d requests, want 1", r.Earlier[MaxRevisions-2].Total[0].Requests)
	}

	f.clock.Add(RevisionGrace + time.Second)
	updateSpec(t, f.st, spec(MaxRevisions+3))
	if r := f.report(t, "checkout", 0); len(r.Earlier) != 1 || r.Earlier[0].Revision != strconv.Itoa(MaxRevisions+2) {
		t.Errorf("after RevisionGrace: earlier %v, want only the revision just replaced", r.Earlier)
	}

	// Revision 1+RevisionSlots shares revision 1's stat names: it takes them.
	f.clock.Add(RevisionGrace + time.Second)
	updateSpec(t, f.st, spec(MaxRevisions+4))
	updateSpec(t, f.st, spec(1+wire.RevisionSlots))
	if nameAt(1+wire.RevisionSlots, 0, "2xx") != name(0, "2xx") {
		t.Fatal("revisions RevisionSlots apart have different stat names")
	}
	f.report(t, "checkout", 0)
	f.add(t, "p1", counter(name(0, "2xx"), 5))
	if r := f.report(t, "checkout", 0); r.Revision != strconv.Itoa(1+wire.RevisionSlots) || r.Total[0].Requests != 5 {
		t.Errorf("revision %s, requests %d, want %d, 5", r.Revision, r.Total[0].Requests, 1+wire.RevisionSlots)
	}
}

func TestWindow(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 10))
	f.clock.Add(10 * time.Minute)
	f.add(t, "p1", counter(name(0, "2xx"), 1))
	r := f.report(t, "checkout", 5)
	if r.Window[0].Requests != 1 || r.Total[0].Requests != 11 {
		t.Errorf("window %d total %d, want 1, 11", r.Window[0].Requests, r.Total[0].Requests)
	}
	if r := f.report(t, "checkout", 11); r.Window[0].Requests != 11 {
		t.Errorf("11-minute window %d, want 11", r.Window[0].Requests)
	}
	for _, m := range []int{-1, MaxWindowMinutes + 1} {
		if _, err := f.a.Report(context.Background(), "checkout", m); err == nil || !strings.Contains(err.Error(), "minutes") {
			t.Errorf("minutes=%d: error %v", m, err)
		}
	}
	if _, err := f.a.Report(context.Background(), "nope", 0); err == nil {
		t.Error("report of an unknown experiment")
	}
}

// flakyStore is a store whose reads (its revision, the list) fail while
// fail is set.
type flakyStore struct {
	store.Store
	fail atomic.Bool
}

func (s *flakyStore) Revision(ctx context.Context) (int64, error) {
	if s.fail.Load() {
		return 0, store.ErrUnavailable
	}
	return s.Store.Revision(ctx)
}

func (s *flakyStore) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	if s.fail.Load() {
		return nil, 0, store.ErrUnavailable
	}
	return s.Store.List(ctx)
}

// TestStoreDownKeepsCounting: a flush that finds the store unreadable
// after a write is counted under the experiments read last, and a later
// flush re-reads them.
func TestStoreDownKeepsCounting(t *testing.T) {
	f := newFixture(t, checkout)
	fs := &flakyStore{Store: f.st}
	a, err := New(t.Context(), fs, experiment.FromStore, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	a.Add(context.Background(), "p1", "", []*metricsv1.Metric{counter(name(0, "2xx"), 1)})
	ctx := context.Background()
	fs.fail.Store(true) // the write goes through; reads through fs fail
	updateSpec(t, f.st, `{"key":"checkout","variations":["a","b"],"weights":[0.2,0.8],"observe":true,"assignmentRevision":2}`)
	a.Add(ctx, "p1", "", []*metricsv1.Metric{counter(name(0, "2xx"), 2)})
	if got := a.exps["checkout"].total[0].counts[0]; got != 3 {
		t.Errorf("with the store down: %d counted, want 3 under the revision read last", got)
	}
	fs.fail.Store(false)
	a.Add(ctx, "p1", "", []*metricsv1.Metric{counter(name(1, "2xx"), 5)})
	if e := a.exps["checkout"]; e.weights[1] != 0.5 || e.total[1].counts[0] != 5 {
		t.Errorf("within refreshBackoff of the failed read: weights %v, counts %v, want the revision read last", e.weights, e.total)
	}
	f.clock.Add(refreshBackoff)
	a.Add(ctx, "p1", "", []*metricsv1.Metric{counter(nameAt(2, 1, "2xx"), 5)})
	if e := a.exps["checkout"]; e.weights[1] != 0.8 || e.total[1].counts[0] != 5 || e.total[0].counts[0] != 0 {
		t.Errorf("after the store is back: weights %v, counts %v", e.weights, e.total)
	}
}

// blockingStore is a store whose List blocks, once armed, until released
// (a store that does not answer, as etcd without quorum until
// -store-timeout).
type blockingStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	if s.armed.Load() {
		s.entered <- struct{}{}
		<-s.release
		return nil, 0, store.ErrUnavailable
	}
	return s.Store.List(ctx)
}

// TestSlowStoreBlocksNothing: while a read of the experiments waits for
// the store, proxies' flushes, reports and /metrics scrapes go on with
// the experiments read last.
func TestSlowStoreBlocksNothing(t *testing.T) {
	f := newFixture(t, checkout)
	bs := &blockingStore{Store: f.st, entered: make(chan struct{}, 1), release: make(chan struct{})}
	a, err := New(t.Context(), bs, experiment.FromStore, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Add(ctx, "p1", "", []*metricsv1.Metric{counter(name(0, "2xx"), 1)})
	// Armed before the write: the first read of it, whether this flush's
	// or the one allotd's following of writes makes, waits for the store
	// (armed after it, following could read the write first and leave the
	// flush nothing to read).
	bs.armed.Store(true)
	updateSpec(t, f.st, `{"key":"checkout","variations":["a","b"],"weights":[0.2,0.8],"observe":true,"assignmentRevision":2}`)
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		a.Add(ctx, "p1", "", []*metricsv1.Metric{counter(name(0, "2xx"), 1)})
	}()
	select {
	case <-bs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush did not read the store")
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(bs.release)
			<-slow
		}
	}
	defer release()
	done := make(chan string, 3)
	go func() {
		a.Add(ctx, "p2", "", []*metricsv1.Metric{counter(name(1, "2xx"), 2)})
		done <- "add"
	}()
	go func() {
		if _, err := a.Report(ctx, "checkout", 0); err != nil {
			t.Error(err)
		}
		done <- "report"
	}()
	go func() {
		testutil.CollectAndCount(a, "allot_outcome_requests_total")
		done <- "collect"
	}()
	deadline := time.After(5 * time.Second)
	for range 3 {
		select {
		case <-done:
		case <-deadline:
			release()
			t.Fatal("a flush, report or scrape waited for the store")
		}
	}
	release()
	if got := a.exps["checkout"].total[1].counts[0]; got != 2 {
		t.Errorf("p2's flush: %d counted, want 2", got)
	}
}

// TestOtherBucketsDropped: a proxy whose histograms have other buckets
// than wire.LatencyBounds is dropped, whoever reports first; the others count.
func TestOtherBucketsDropped(t *testing.T) {
	f := newFixture(t, checkout)
	custom := histogram(latency(0), 1, 2, 0)
	custom.GetHistogram().DataPoints[0].ExplicitBounds = []float64{10, 100}
	custom.GetHistogram().DataPoints[0].BucketCounts = []uint64{1, 2, 0}
	f.add(t, "custom", custom)
	f.add(t, "p1", histogram(latency(0), 4, 0, 0))
	if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reasonValue)); got != 1 {
		t.Errorf("dropped{reason=value} = %v, want 1 (the other buckets)", got)
	}
	if r := f.report(t, "checkout", 0); r.Total[0].Timed != 4 {
		t.Errorf("timed %d, want 4 (p1's)", r.Total[0].Timed)
	}
}

// TestEmptyHistogramDropped: a histogram with samples but no buckets is
// refused (its quantiles would be NaN).
func TestEmptyHistogramDropped(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", &metricsv1.Metric{Name: latency(0), Data: &metricsv1.Metric_Histogram{Histogram: &metricsv1.Histogram{
		AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
		DataPoints:             []*metricsv1.HistogramDataPoint{{Count: 5}}}}})
	if got := testutil.ToFloat64(f.a.dropped.WithLabelValues(reasonValue)); got != 1 {
		t.Errorf("dropped{reason=value} = %v, want 1", got)
	}
	if q := f.report(t, "checkout", 0).Total[0].LatencyMs; q != nil {
		t.Errorf("latency %+v, want none", q)
	}
}

// TestRequestsLabelledWithRevision: allot_outcome_requests_total carries
// the current revision, so that a new revision is a new series.
func TestRequestsLabelledWithRevision(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 3))
	rev := f.report(t, "checkout", 0).Revision
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.a)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var fam *clientmodel.MetricFamily
	for _, mf := range got {
		if mf.GetName() == "allot_outcome_requests_total" {
			fam = mf
		}
	}
	if fam == nil || len(fam.GetMetric()) != 2*numClasses {
		t.Fatalf("family %v", fam)
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["revision"] != rev {
			t.Errorf("series %v: revision %q, want %q", labels, labels["revision"], rev)
		}
	}
}

// TestRecreatedExperimentStartsOver: an experiment deleted and created
// again under the same key starts at revision 1 again; nothing the
// deleted one counted is the new one's, even when allotd reads the two
// writes at once.
func TestRecreatedExperimentStartsOver(t *testing.T) {
	f := newFixture(t, checkout)
	f.add(t, "p1", counter(name(0, "2xx"), 30))
	ctx := context.Background()
	cur, err := f.st.Get(ctx, "checkout")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Second)
	f.a.reading.Lock() // no read between the two writes
	if err := f.st.Delete(ctx, "checkout", cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Create(ctx, &store.Experiment{Key: "checkout", Spec: []byte(checkout)}, "test"); err != nil {
		t.Fatal(err)
	}
	f.a.reading.Unlock()
	r := f.report(t, "checkout", 0)
	if r.Revision != "1" || r.Total[0].Requests != 0 || len(r.Earlier) != 0 {
		t.Errorf("the experiment created again: revision %s, %d requests, earlier %v; want 1, 0, none", r.Revision, r.Total[0].Requests, r.Earlier)
	}
}

// TestEarlierRevisionKeepsItsServices: a late flush of an earlier revision
// counts if that revision ran on the reporting proxy's cluster, though the
// write that replaced it took the cluster out.
func TestEarlierRevisionKeepsItsServices(t *testing.T) {
	f := newFixture(t, `{"key":"checkout","variations":["a","b"],"observe":true,"services":["a","b"],"assignmentRevision":1}`)
	f.report(t, "checkout", 0)
	updateSpec(t, f.st, `{"key":"checkout","variations":["a","b"],"weights":[0.2,0.8],"observe":true,"services":["a"],"assignmentRevision":2}`)
	f.report(t, "checkout", 0)
	f.a.Add(context.Background(), "b-1", "b", []*metricsv1.Metric{counter(name(0, "2xx"), 7), counter(nameAt(2, 0, "2xx"), 5)})
	r := f.report(t, "checkout", 0)
	if len(r.Earlier) != 1 || r.Earlier[0].Total[0].Requests != 7 || r.Total[0].Requests != 0 {
		t.Errorf("revision 1 counted %v, revision 2 %d; want 7 from cluster b in revision 1, none in 2 (b does not run it)", r.Earlier, r.Total[0].Requests)
	}
}

// deafStore is a store whose watches never report a write.
type deafStore struct{ store.Store }

func (deafStore) Watch(context.Context) <-chan int64 { return make(chan int64) }

// TestReportReadsAWriteItsWatchHasNotReported: a report asks the store's
// revision itself, even when a revision its watch reported earlier marks
// the experiments stale: an experiment just written is reported, not
// refused as unobserved.
func TestReportReadsAWriteItsWatchHasNotReported(t *testing.T) {
	f := newFixture(t, checkout)
	a, err := New(t.Context(), deafStore{f.st}, experiment.FromStore, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	was, err := f.st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const other = `{"key":"other","variations":["a","b"],"weights":[0.5,0.5],"observe":true,"assignmentRevision":1}`
	if _, err := f.st.Create(ctx, &store.Experiment{Key: "other", Spec: []byte(other)}, "test"); err != nil {
		t.Fatal(err)
	}
	a.see(was) // the watch's last report: the revision already read
	if _, err := a.Report(ctx, "other", 0); err != nil {
		t.Errorf("a report right after the write: %v", err)
	}
}

// TestReadDecodesOnlyWhatChanged: after a write, the aggregator decodes
// the experiments whose document changed, not every one again.
func TestReadDecodesOnlyWhatChanged(t *testing.T) {
	f := newFixture(t, checkout)
	var decoded []string
	count := func(se *store.Experiment) (*experimentv1.Experiment, error) {
		decoded = append(decoded, se.Key)
		return experiment.FromStore(se)
	}
	a, err := New(t.Context(), deafStore{f.st}, count, nil, WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.Report(ctx, "checkout", 0); err != nil {
		t.Fatal(err)
	}
	const other = `{"key":"other","variations":["a","b"],"weights":[0.5,0.5],"observe":true,"assignmentRevision":1}`
	if _, err := f.st.Create(ctx, &store.Experiment{Key: "other", Spec: []byte(other)}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Report(ctx, "other", 0); err != nil {
		t.Fatal(err)
	}
	updateSpec(t, f.st, strings.Replace(checkout, `"weights":[0.5,0.5]`, `"weights":[0.4,0.6]`, 1))
	r, err := a.Report(ctx, "checkout", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(decoded, ","), "checkout,other,checkout"; got != want {
		t.Fatalf("decoded %s, want %s: each experiment once per change of its document", got, want)
	}
	if r.GetExperiment() != "checkout" {
		t.Fatalf("report after the update is of %q", r.GetExperiment())
	}
	if err := f.st.Delete(ctx, "other", 0, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Report(ctx, "checkout", 0); err != nil {
		t.Fatal(err)
	}
	if _, kept := a.decoded["other"]; kept || len(decoded) != 3 {
		t.Fatalf("after a delete: the deleted experiment kept %v, decoded %s", kept, strings.Join(decoded, ","))
	}
}
