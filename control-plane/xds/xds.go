// Package xds serves Allot's filter configuration to Envoy proxies over xDS:
// ECDS resources (a TypedExtensionConfig carrying the Wasm filter or the
// native dynamic module filter) on an ADS or a dedicated ECDS gRPC stream,
// built per proxy cluster by a Builder and re-pushed whenever Refresh finds
// that a cluster's version changed. Each proxy receives the resource of the
// artifact its node metadata names (ArtifactKey; Wasm when absent); a proxy
// naming an artifact the server does not serve receives nothing and is
// reported (rollout.StateUnserved). A cluster none of whose proxies has been
// connected for a grace period is forgotten, snapshots and all
// (WithClusterGrace), and built again when one of them connects.
//
// It tracks every connected proxy (what it was sent, acknowledged or
// rejected), lets a caller wait until a change reached every proxy
// (WaitFor), never re-sends a configuration a proxy rejected or already runs,
// and exports Prometheus metrics (Collectors).
//
// It depends on go-control-plane and gRPC, never on the store or the admin
// API: the server package wires those together.
package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	cplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Builder returns the ECDS resource for proxies of one cluster and its
// version. The same inputs must give the same version: the version decides
// whether proxies are reconfigured.
type Builder func(cluster string) (version string, ext *corev3.TypedExtensionConfig, err error)

// ArtifactBuilder returns, for proxies of one cluster, the configuration
// version and one ECDS resource per artifact in Artifacts, keyed by the
// artifact's name. The resources carry the same filter configuration in
// each artifact's wrapping, so one version covers them all: a cluster has
// one target version whatever its proxies run. The same inputs must give
// the same version. atLeast is the store revision the configuration is to
// be built from, or a later one, when the caller knows it (RefreshFrom);
// zero asks for the store's latest.
type ArtifactBuilder func(cluster string, atLeast int64) (version string, exts map[string]*corev3.TypedExtensionConfig, err error)

// Server is the xDS server. Create it with New (Wasm proxies only) or
// NewArtifacts (every artifact), register it on a gRPC server with
// Register, and call Refresh after anything its builder reads changes.
// It tracks every connected proxy (Proxies, Status) and can wait for a
// change to reach them (WaitFor).
type Server struct {
	build   ArtifactBuilder
	served  []string // the artifacts build returns, sorted
	hash    nodeHash
	log     *slog.Logger
	now     func() time.Time
	cache   *holdCache
	xds     serverv3.Server
	metrics *metrics

	maxClusters int // MaxClusters, or lower (WithMaxClusters)
	maxStreams  int // DefaultMaxStreams, or WithMaxStreams

	refreshMu sync.Mutex // serializes build+set, so an older build never overwrites a newer one
	grace     time.Duration

	mu          sync.Mutex
	clusters    map[string]string    // cluster → version of its current snapshots (one per artifact)
	since       map[string]time.Time // cluster → when its current snapshots were set
	idle        map[string]time.Time // cluster → since when no stream uses it (useLocked, forgetIdle)
	users       map[string]int       // cluster → the identified streams (and delta streams) using it
	streams     map[int64]*stream    // open xDS streams
	conns       map[string][]*stream // remote address → its identified streams (ConnProxy)
	deltas      map[int64]string     // delta xDS streams with an admitted request → their cluster
	admitted    int                  // identified streams and delta streams with a request: what maxStreams bounds
	streamsFull bool                 // a stream was refused since the count was last under maxStreams
	changed     chan struct{}        // closed at the next tracked change; made when asked for (Changes)
	recount     chan struct{}        // closed and replaced when Unsettled is to count again (Recount)
	// pendingFloor is a lower bound of the proxies pending their cluster's
	// version (Unsettled); 0 when it must be counted again.
	pendingFloor int
	// joins counts the streams identified so far (Joins).
	joins uint64
}

// DefaultClusterGrace is how long a cluster no stream uses keeps its
// snapshots (WithClusterGrace): long enough for its proxies to reconnect
// after a restart of theirs or a failover without a rebuild.
const DefaultClusterGrace = time.Minute

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithMaxClusters lowers the number of clusters the server tracks below
// MaxClusters (a test's; never above it: allotd's memory bound counts on
// it).
func WithMaxClusters(n int) Option {
	return func(s *Server) {
		if n > 0 && n < MaxClusters {
			s.maxClusters = n
		}
	}
}

// WithMaxStreams sets how many xDS streams (state of the world and delta,
// ADS and ECDS) the server serves at once (DefaultMaxStreams if n is not
// positive). A stream counts once its first request is admitted: the
// first request of a stream beyond the limit is refused with
// RESOURCE_EXHAUSTED before it is tracked, and counted in
// allot_xds_over_limit_total{field="streams", action="refused"}.
func WithMaxStreams(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxStreams = n
		}
	}
}

// WithClusterGrace sets how long a cluster keeps its snapshots once no
// stream uses it (DefaultClusterGrace if d is not positive). Then it is
// forgotten: its snapshots are cleared, Refresh no longer builds it, and
// it leaves Targets; a proxy of it that connects later has its snapshots
// built again. It is forgotten between d and 1.25·d after its last stream
// closed.
func WithClusterGrace(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.grace = d
		}
	}
}

// New returns a Server that serves the Wasm artifact only: build's resource
// goes to proxies running ArtifactWasm, and a proxy naming any other
// artifact is unserved.
func New(ctx context.Context, build Builder, opts ...Option) *Server {
	wasm := func(cluster string, _ int64) (string, map[string]*corev3.TypedExtensionConfig, error) {
		v, ext, err := build(cluster)
		return v, map[string]*corev3.TypedExtensionConfig{ArtifactWasm: ext}, err
	}
	return newServer(ctx, wasm, []string{ArtifactWasm}, opts)
}

// NewArtifacts returns a Server that serves every artifact in Artifacts:
// each proxy receives build's resource for the artifact its node metadata
// names.
func NewArtifacts(ctx context.Context, build ArtifactBuilder, opts ...Option) *Server {
	return newServer(ctx, build, Artifacts, opts)
}

func newServer(ctx context.Context, build ArtifactBuilder, served []string, opts []Option) *Server {
	s := &Server{
		build:    build,
		served:   slices.Sorted(slices.Values(served)),
		hash:     nodeHash{served: map[string]bool{}},
		log:      slog.New(slog.DiscardHandler),
		now:      time.Now,
		grace:    DefaultClusterGrace,
		clusters: map[string]string{},
		since:    map[string]time.Time{},
		idle:     map[string]time.Time{},
		users:    map[string]int{},
		streams:  map[int64]*stream{},
		conns:    map[string][]*stream{},
		deltas:   map[int64]string{},
		recount:  make(chan struct{}),
	}
	s.maxClusters, s.maxStreams = MaxClusters, DefaultMaxStreams
	for _, a := range served {
		s.hash.served[a] = true
	}
	for _, o := range opts {
		o(s)
	}
	s.metrics = newMetrics(s)
	snapshots := cachev3.NewSnapshotCache(false, s.hash, cplog.LoggerFuncs{
		DebugFunc: func(f string, a ...any) {
			// The cache logs every response at debug level: format only what is kept.
			if s.log.Enabled(context.Background(), slog.LevelDebug) {
				s.log.Debug(fmt.Sprintf(f, a...), "component", "xds_cache")
			}
		},
		WarnFunc:  func(f string, a ...any) { s.log.Warn(fmt.Sprintf(f, a...), "component", "xds_cache") },
		ErrorFunc: func(f string, a ...any) { s.log.Error(fmt.Sprintf(f, a...), "component", "xds_cache") },
	})
	s.cache = newHoldCache(snapshots, s.hash)
	s.xds = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc:         s.onStreamOpen,
		StreamClosedFunc:       s.onStreamClosed,
		StreamRequestFunc:      s.onStreamRequest,
		StreamResponseFunc:     s.onStreamResponse,
		StreamDeltaRequestFunc: s.onDeltaRequest,
		DeltaStreamClosedFunc:  s.onDeltaClosed,
	}, sotw.WithOrderedADS()) // ADS and ECDS streams alike (ecdsStreams)
	go s.forgetLoop(ctx)
	return s
}

// Register serves ADS and ECDS on g: their streams only. ECDS's unary
// FetchExtensionConfigs is not served (UNIMPLEMENTED): go-control-plane would
// answer it from the snapshots directly, past the stream callbacks that
// track proxies and past any stream interceptor that authorizes them, and
// Envoy never calls it.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(g, ecdsStreams{s.xds})
}

// ecdsStreams is the ECDS service with its streams only.
type ecdsStreams struct{ xds serverv3.Server }

// StreamExtensionConfigs serves an ECDS stream with go-control-plane's
// ordered ADS loop, as ADS streams are (newServer): one select on one
// channel, where its loop for other streams calls reflect.Select on every
// message. typedECDSStream gives each request without a type URL ECDS's,
// which the stream implies and the ADS loop requires, and marks the
// stream as ECDS for onStreamOpen.
func (e ecdsStreams) StreamExtensionConfigs(st extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsServer) error {
	return e.xds.StreamHandler(typedECDSStream{st, context.WithValue(st.Context(), ecdsStreamKey{}, true)}, resource.AnyType)
}

// ecdsStreamKey marks the context of a dedicated ECDS stream (typedECDSStream).
type ecdsStreamKey struct{}

type typedECDSStream struct {
	extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsServer
	ctx context.Context
}

func (s typedECDSStream) Context() context.Context { return s.ctx }

func (s typedECDSStream) Recv() (*discoveryv3.DiscoveryRequest, error) {
	req, err := s.ExtensionConfigDiscoveryService_StreamExtensionConfigsServer.Recv()
	if req != nil && req.GetTypeUrl() == "" {
		req.TypeUrl = resource.ExtensionConfigType
	}
	return req, err
}

func (e ecdsStreams) DeltaExtensionConfigs(st extensionv3.ExtensionConfigDiscoveryService_DeltaExtensionConfigsServer) error {
	return e.xds.DeltaExtensionConfigs(st)
}

func (ecdsStreams) FetchExtensionConfigs(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, "xds: FetchExtensionConfigs is not served; stream the configuration (ADS or ECDS)")
}

// onStreamRequest refuses a proxy over a limit (admit), or whose node
// changed within the stream, or one stream too many, or a resource type
// its stream does not serve (track, servedType), tracks it
// and makes sure its cluster has snapshots before the cache answers its
// request. A proxy whose cluster is refused (one too many) or cannot be
// built is untracked at once: its stream ends, and it is never listed.
func (s *Server) onStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	if err := s.admit(req.GetNode()); err != nil {
		s.untrack(id)
		return err
	}
	if err := s.track(id, req); err != nil {
		s.untrack(id)
		return err
	}
	if err := s.ensureCluster(req.GetNode().GetCluster()); err != nil {
		s.untrack(id)
		return err
	}
	return nil
}

// onDeltaRequest makes sure a delta-xDS proxy's cluster has a snapshot.
// Delta streams are served but not tracked: Envoy's ADS with api_type GRPC
// (our bootstraps) is state of the world. The first request counts the
// stream against the server's limit of streams (admitStream); a later
// one naming another cluster is refused, like a tracked stream's
// (sameNode). go-control-plane calls this before it fills a request
// without a node with the stream's: such a request keeps the stream's
// cluster.
func (s *Server) onDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
	if err := s.admit(req.GetNode()); err != nil {
		return err
	}
	// No type URL: go-control-plane refuses it on ADS and gives it ECDS's
	// on an ECDS stream. Any other must be an xDS type (servedType).
	if t := req.GetTypeUrl(); t != "" {
		if err := s.servedType("", req.GetNode().GetId(), t); err != nil {
			return err
		}
	}
	s.mu.Lock()
	cluster, ok := s.deltas[id]
	switch {
	case ok && req.GetNode() == nil:
	case ok:
		if err := s.sameNode(req.GetNode().GetId(), cluster, req.GetNode()); err != nil {
			s.mu.Unlock()
			return err
		}
	default:
		if err := s.admitStream(s.admitted); err != nil {
			s.mu.Unlock()
			return err
		}
		cluster = req.GetNode().GetCluster()
		s.admitted++
		s.deltas[id] = cluster
		s.useLocked(cluster, 1) // in use before it is ensured (see forgetIdle)
	}
	s.mu.Unlock()
	return s.ensureCluster(cluster)
}

func (s *Server) onDeltaClosed(id int64, _ *corev3.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cluster, ok := s.deltas[id]; ok {
		delete(s.deltas, id)
		s.admitted--
		s.useLocked(cluster, -1)
	}
}

// forgetLoop forgets idle clusters (forgetIdle) every quarter of the grace
// period until ctx ends.
func (s *Server) forgetLoop(ctx context.Context) {
	tick := time.NewTicker(max(s.grace/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.forgetIdle()
		}
	}
}

// forgetIdle forgets every cluster that no stream has used for the grace
// period: its snapshots (one per artifact) leave the cache, and its
// version, since-time and idle-time leave the server, so that throwaway
// cluster names cost nothing once their streams are gone. A cluster is in
// use while an identified stream (or a delta stream) of it is open
// (s.users); its idle clock starts when its last one closes (useLocked),
// so it is forgotten between the grace period and 1.25 of it after that.
//
// It holds refreshMu: a Refresh never builds a cluster being forgotten,
// and a stream's request marks its cluster in use (track, under s.mu)
// before ensureCluster takes refreshMu; so either this sees the stream
// and keeps the cluster, or ensureCluster runs after and builds it again.
func (s *Server) forgetIdle() {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	forgot := 0
	for c := range s.clusters {
		since, idle := s.idle[c]
		switch {
		case s.users[c] > 0:
			delete(s.idle, c)
		case !idle:
			s.idle[c] = now // built after its last stream closed
		case now.Sub(since) >= s.grace:
			s.forgetLocked(c)
			forgot++
			s.log.Debug("cluster forgotten: no proxy used it", "cluster", c, "idle", now.Sub(since))
		}
	}
	for c := range s.idle {
		if _, ok := s.clusters[c]; !ok {
			delete(s.idle, c) // its first build failed
		}
	}
	if forgot > 0 {
		s.notify()
	}
}

// forgetLocked forgets cluster: its snapshots, version, since-time and
// idle-time. s.refreshMu and s.mu must be held.
func (s *Server) forgetLocked(c string) {
	for _, a := range s.served {
		s.cache.ClearSnapshot(snapshotKey(a, c))
	}
	delete(s.clusters, c)
	delete(s.since, c)
	delete(s.idle, c)
	s.resetPending() // its proxies' versions changed at once
}

// evictLocked makes room for a new cluster at the limit: it forgets the
// cluster idle the longest (no stream uses it: in its grace period), and
// reports false when every cluster has a stream. s.refreshMu and s.mu
// must be held.
func (s *Server) evictLocked() bool {
	victim, oldest := "", time.Time{}
	for c := range s.clusters {
		if s.users[c] > 0 {
			continue
		}
		since, ok := s.idle[c]
		if !ok {
			since = s.now() // not yet seen idle (forgetIdle): idle since now at the earliest
		}
		if victim == "" || since.Before(oldest) {
			victim, oldest = c, since
		}
	}
	if victim == "" {
		return false
	}
	s.forgetLocked(victim)
	s.metrics.overLimit.WithLabelValues(fieldClusters, actionEvicted).Inc()
	s.log.Info("cluster forgotten for a new one: the cluster limit is reached", "cluster", victim,
		"idle", s.now().Sub(oldest), "limit", s.maxClusters)
	s.notify()
	return true
}

// ensureCluster builds the first snapshots of a cluster not seen before.
// When the server tracks maxClusters already, the cluster idle the longest
// makes room (evictLocked); when every one has a stream, it is refused.
// Checked under refreshMu, the only lock clusters are added under, so
// never exceeded.
//
// Builds are serialized by refreshMu, and a Refresh takes its list of
// clusters under refreshMu too: a write's Refresh either runs before this
// build (which then reads the store after the write) or waits for it and
// rebuilds the new cluster. Reading the list outside refreshMu let a
// cluster register, built from the store before a write, after that
// write's Refresh had listed the clusters — stale until the next write.
func (s *Server) ensureCluster(cluster string) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	s.mu.Lock()
	_, known := s.clusters[cluster]
	n := len(s.clusters)
	full := !known && n >= s.maxClusters && !s.evictLocked()
	s.mu.Unlock()
	if known {
		return nil
	}
	if full {
		return s.refuseCluster(cluster, n)
	}
	return s.refreshLocked(context.Background(), cluster, 0)
}

// Refresh rebuilds the snapshot of every cluster known (connected
// proxies', and those of the grace period) from the store's latest state
// and pushes those whose version changed.
func (s *Server) Refresh(ctx context.Context) error { return s.RefreshFrom(ctx, 0) }

// RefreshFrom is Refresh from store revision atLeast or a later one: the
// revision a watch of the store delivered, which the builder need not ask
// the store for again (ArtifactBuilder).
func (s *Server) RefreshFrom(ctx context.Context, atLeast int64) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	s.mu.Lock()
	clusters := make([]string, 0, len(s.clusters))
	for c := range s.clusters {
		clusters = append(clusters, c)
	}
	s.mu.Unlock()
	slices.Sort(clusters)
	var errs []error
	for _, c := range clusters {
		if err := s.refreshLocked(ctx, c, atLeast); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// refreshLocked rebuilds one cluster; s.refreshMu must be held.
func (s *Server) refreshLocked(ctx context.Context, cluster string, atLeast int64) error {
	err := s.setCluster(ctx, cluster, atLeast)
	if err != nil {
		s.metrics.pushErrors.Inc()
	}
	return err
}

func (s *Server) setCluster(ctx context.Context, cluster string, atLeast int64) error {
	version, exts, err := s.build(cluster, atLeast)
	if err != nil {
		return fmt.Errorf("build snapshot for cluster %q: %w", cluster, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.clusters[cluster]; ok && old == version {
		return nil
	}
	// Every artifact's snapshot is built before any is set, so a cluster's
	// proxies never run two versions because one artifact failed.
	snaps := make([]*cachev3.Snapshot, len(s.served))
	for i, a := range s.served {
		ext := exts[a]
		if ext == nil {
			return fmt.Errorf("build snapshot for cluster %q: no resource for artifact %q", cluster, a)
		}
		snaps[i], err = cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{
			resource.ExtensionConfigType: {ext},
		})
		if err != nil {
			return fmt.Errorf("snapshot for cluster %q, artifact %q: %w", cluster, a, err)
		}
	}
	for i, a := range s.served {
		if err := s.cache.SetSnapshot(ctx, snapshotKey(a, cluster), snaps[i]); err != nil {
			return fmt.Errorf("set snapshot for cluster %q, artifact %q: %w", cluster, a, err)
		}
	}
	s.clusters[cluster] = version
	s.since[cluster] = s.now()
	s.notify()
	s.resetPending() // its proxies' versions changed at once
	s.log.Info("snapshot updated", "cluster", cluster, "version", version)
	return nil
}

// Version returns the version currently served to cluster, if any.
func (s *Server) Version(cluster string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.clusters[cluster]
	return v, ok
}
