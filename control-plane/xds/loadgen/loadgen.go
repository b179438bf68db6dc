// Package loadgen simulates a fleet of Envoy proxies on an xDS server: each
// opens a state-of-the-world stream (ADS or ECDS), subscribes to the allot
// ECDS resource and acknowledges every response at once, as Envoy does. It
// measures, per configuration version, how long the fleet takes from the
// first proxy receiving it to the last one acknowledging it.
//
// It speaks only the xDS wire protocol; it must not import the rest of the
// control plane, so it works against any allotd.
package loadgen

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
}

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
	f := &Fleet{
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
	}
	return f, nil
}

// run acknowledges every response on one stream.
func (f *Fleet) run(i int, send func(*discoveryv3.DiscoveryRequest) error, recv func() (*discoveryv3.DiscoveryResponse, error)) {
	for {
		r, err := recv()
		if err != nil {
			return
		}
		now := time.Now()
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
