// Package loadgen simulates a fleet of Envoy proxies on an xDS server: each
// opens a state-of-the-world stream (ADS or ECDS), subscribes to the allot
// ECDS resource and acknowledges every response at once, as Envoy does. It
// measures, per configuration version, how long the fleet takes from the
// first proxy receiving it to the last one acknowledging it.
//
// With Config.Report, each proxy also exports outcome stats as Envoy's
// OpenTelemetry stat sink does (OTLP MetricsService/Export on its xDS
// connection, deltas at a fixed interval): what a mesh's reporting costs
// allotd.
//
// It speaks only the xDS and OTLP wire protocols, with the filter's stat
// names and allotd's latency buckets; it must not import the rest of the
// control plane's server side, so it works against any allotd.
package loadgen

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allotmesh/allot/filter/wire"
)

// MaxStreamsPerConn is the most streams Connect opens on one connection:
// allotd's bound (xds.MaxStreamsPerConnection, which a test of the xds
// package compares with this one); more would wait for a free slot.
const MaxStreamsPerConn = 16

// Wire names: what the bootstraps in envoy-configs/ subscribe to.
const (
	TypeURL      = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	ResourceName = "allot"
)

// Config describes the fleet.
type Config struct {
	// Addr is the xDS server, host:port.
	Addr string
	// Clients is the number of simulated proxies (streams).
	Clients int
	// Conns is the number of gRPC connections the streams share (0: one
	// per client, like Envoy); at least enough for MaxStreamsPerConn
	// streams each.
	Conns int
	// Cluster is every client's node cluster.
	Cluster string
	// Node prefixes the node ids, <Node>-<i> (Cluster when empty): fleets
	// of one cluster on several servers need prefixes of their own.
	Node string
	// ECDS uses the dedicated ECDS service instead of ADS.
	ECDS bool
	// Report, when set, makes every proxy export outcome stats once it
	// acknowledged a configuration and Fleet.Report started. It needs one
	// connection per proxy (Conns 0): allotd takes an export to be the
	// proxy's whose xDS stream is open on its connection.
	Report *Report
}

// Report is what each proxy exports, every Interval: for each of
// Experiments, under assignment revision Revision, and each of Variations
// variations, a delta of Requests
// responses — ErrorsPerMille of them 5xx, the rest 2xx — and as many
// latency samples in the (5, 10] ms bucket; Envoy's sink sends the other
// classes' zero deltas too.
type Report struct {
	Interval       time.Duration
	Experiments    []string
	Revision       int64
	Variations     int
	Requests       uint64
	ErrorsPerMille uint64
}

// Request is one export of r, as the sink sends it.
func (r *Report) Request() *collectorv1.ExportMetricsServiceRequest {
	var ms []*metricsv1.Metric
	fails := r.Requests * r.ErrorsPerMille / 1000
	for _, key := range r.Experiments {
		for v := range r.Variations {
			for c := range wire.NumClasses {
				n := uint64(0)
				switch c {
				case wire.Class2xx:
					n = r.Requests - fails
				case wire.Class5xx:
					n = fails
				}
				ms = append(ms, &metricsv1.Metric{Name: wire.StatName(wire.OutcomeMetric(key, r.Revision, v, c)),
					Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{IsMonotonic: true,
						AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
						DataPoints:             []*metricsv1.NumberDataPoint{{Value: &metricsv1.NumberDataPoint_AsInt{AsInt: int64(n)}}}}}})
			}
			buckets := make([]uint64, len(wire.LatencyBounds)+1)
			buckets[slices.Index(wire.LatencyBounds, 10)] = r.Requests
			ms = append(ms, &metricsv1.Metric{Name: wire.StatName(wire.OutcomeMetric(key, r.Revision, v, wire.Latency)),
				Data: &metricsv1.Metric_Histogram{Histogram: &metricsv1.Histogram{
					AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
					DataPoints: []*metricsv1.HistogramDataPoint{{Count: r.Requests, Sum: ptr(float64(r.Requests) * 7),
						ExplicitBounds: wire.LatencyBounds, BucketCounts: buckets}}}}})
		}
	}
	return &collectorv1.ExportMetricsServiceRequest{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		ScopeMetrics: []*metricsv1.ScopeMetrics{{Metrics: ms}}}}}
}

func ptr[T any](v T) *T { return &v }

// Result is how one version reached the fleet.
type Result struct {
	// Version is the configuration version.
	Version string
	// Clients is how many clients acknowledged it.
	Clients int
	// Spread is from the first client receiving the version to the last
	// acknowledging it.
	Spread time.Duration
	// P50 and P99 are percentiles of the clients' acknowledgement times,
	// measured from the first client receiving the version.
	P50, P99 time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("version %s: %d clients acked, first response → last ACK %v (p50 %v, p99 %v)",
		r.Version, r.Clients, r.Spread.Round(time.Microsecond), r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
}

// Fleet is a connected set of simulated proxies.
type Fleet struct {
	n       int
	conns   []*grpc.ClientConn
	results chan Result

	report    *Report
	reporting chan struct{} // closed by Report
	stopping  chan struct{} // closed by StopReport
	startOnce sync.Once
	stopOnce  sync.Once
	exporters sync.WaitGroup
	// Exported and Refused count the exports allotd took and refused.
	Exported, Refused atomic.Int64

	latest atomic.Pointer[discoveryv3.DiscoveryResponse] // client 0's last response

	mu      sync.Mutex
	rounds  map[string]*round // version → its rollout in progress
	current []string          // client → version acknowledged
	changed chan struct{}
}

// round is one version reaching the fleet; the same version sent again
// later (a revert) is a new round.
type round struct {
	first time.Time       // first response
	acks  []time.Duration // ACK times after first
}

// Connect opens cfg.Clients streams and sends each one's first request.
// The streams live until ctx ends or Close.
func Connect(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.Clients <= 0 {
		return nil, fmt.Errorf("clients: %d, want > 0", cfg.Clients)
	}
	nconns := cfg.Conns
	if nconns <= 0 || nconns > cfg.Clients {
		nconns = cfg.Clients
	}
	nconns = max(nconns, (cfg.Clients+MaxStreamsPerConn-1)/MaxStreamsPerConn)
	if cfg.Report != nil && nconns != cfg.Clients {
		return nil, fmt.Errorf("conns: %d for %d reporting clients, want one per client", nconns, cfg.Clients)
	}
	f := &Fleet{
		report: cfg.Report, reporting: make(chan struct{}), stopping: make(chan struct{}),
		n: cfg.Clients, results: make(chan Result, 64),
		rounds:  map[string]*round{},
		current: make([]string, cfg.Clients), changed: make(chan struct{}),
	}
	for range nconns {
		c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("dial %s: %w", cfg.Addr, err)
		}
		f.conns = append(f.conns, c)
	}
	for i := range cfg.Clients {
		conn := f.conns[i%nconns]
		var st interface {
			Send(*discoveryv3.DiscoveryRequest) error
			Recv() (*discoveryv3.DiscoveryResponse, error)
		}
		var err error
		if cfg.ECDS {
			st, err = extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
		} else {
			st, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("client %d: open stream: %w", i, err)
		}
		node := &corev3.Node{Id: fmt.Sprintf("%s-%d", cmp.Or(cfg.Node, cfg.Cluster), i), Cluster: cfg.Cluster}
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeURL, ResourceNames: []string{ResourceName}}); err != nil {
			f.Close()
			return nil, fmt.Errorf("client %d: first request: %w", i, err)
		}
		go f.run(i, st.Send, st.Recv)
		if cfg.Report != nil {
			f.exporters.Add(1)
			go f.export(ctx, i, collectorv1.NewMetricsServiceClient(conn), cfg.Report.Request())
		}
	}
	return f, nil
}

// Report starts the proxies' exports (Config.Report).
func (f *Fleet) Report() { f.startOnce.Do(func() { close(f.reporting) }) }

// StopReport stops the proxies' exports and returns once none is in
// flight: Exported then counts every export allotd took.
func (f *Fleet) StopReport() {
	f.stopOnce.Do(func() { close(f.stopping) })
	f.exporters.Wait()
}

// export sends req every interval on client i's connection, from a random
// offset within the first interval on, once Report started and client i
// acknowledged a configuration (allotd counts a proxy's outcomes only
// then).
func (f *Fleet) export(ctx context.Context, i int, c collectorv1.MetricsServiceClient, req *collectorv1.ExportMetricsServiceRequest) {
	defer f.exporters.Done()
	select {
	case <-f.reporting:
	case <-f.stopping:
		return
	case <-ctx.Done():
		return
	}
	for {
		f.mu.Lock()
		acked, ch := f.current[i] != "", f.changed
		f.mu.Unlock()
		if acked {
			break
		}
		select {
		case <-ch:
		case <-f.stopping:
			return
		case <-ctx.Done():
			return
		}
	}
	t := time.NewTimer(rand.N(f.report.Interval))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-f.stopping:
			return
		case <-ctx.Done():
			return
		}
		t.Reset(f.report.Interval)
		if _, err := c.Export(ctx, req); err != nil {
			if ctx.Err() != nil {
				return
			}
			f.Refused.Add(1)
		} else {
			f.Exported.Add(1)
		}
	}
}

// run acknowledges every response on one stream.
func (f *Fleet) run(i int, send func(*discoveryv3.DiscoveryRequest) error, recv func() (*discoveryv3.DiscoveryResponse, error)) {
	for {
		r, err := recv()
		if err != nil {
			return
		}
		now := time.Now()
		if i == 0 {
			f.latest.Store(r)
		}
		f.mu.Lock()
		if f.rounds[r.GetVersionInfo()] == nil {
			f.rounds[r.GetVersionInfo()] = &round{first: now}
		}
		f.mu.Unlock()
		err = send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, ResourceNames: []string{ResourceName},
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		if err != nil {
			return
		}
		f.acked(i, r.GetVersionInfo(), time.Now())
	}
}

func (f *Fleet) acked(i int, version string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current[i] = version
	close(f.changed)
	f.changed = make(chan struct{})
	r := f.rounds[version]
	r.acks = append(r.acks, at.Sub(r.first))
	if d := r.acks; len(d) == f.n {
		delete(f.rounds, version)
		slices.Sort(d)
		res := Result{Version: version, Clients: f.n, Spread: d[len(d)-1], P50: d[len(d)/2], P99: d[(len(d)*99)/100]}
		select {
		case f.results <- res:
		default: // nobody reads Results
		}
	}
}

// Latest is the last response the first client received (nil before
// one): what a proxy of the fleet was sent, resource and all.
func (f *Fleet) Latest() *discoveryv3.DiscoveryResponse { return f.latest.Load() }

// Results delivers a Result each time every client has acknowledged a new
// version.
func (f *Fleet) Results() <-chan Result { return f.results }

// Await waits until every client has acknowledged version.
func (f *Fleet) Await(ctx context.Context, version string) error {
	for {
		f.mu.Lock()
		n := 0
		for _, v := range f.current {
			if v == version {
				n++
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if n == f.n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d clients acked version %s: %w", n, f.n, version, ctx.Err())
		}
	}
}

// Close ends every stream.
func (f *Fleet) Close() {
	for _, c := range f.conns {
		c.Close()
	}
}
