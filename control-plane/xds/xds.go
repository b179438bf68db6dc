// Package xds serves Allot's filter configuration to Envoy proxies over xDS:
// ECDS resources (TypedExtensionConfig carrying the Wasm filter) on an ADS or
// a dedicated ECDS gRPC stream, built per proxy cluster by a Builder and
// re-pushed whenever Refresh finds that a cluster's version changed.
//
// It depends on go-control-plane and gRPC, never on the store or the admin
// API: the server package wires those together.
package xds

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	cplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// Builder returns the ECDS resource for proxies of one cluster and its
// version. The same inputs must give the same version: the version decides
// whether proxies are reconfigured.
type Builder func(cluster string) (version string, ext *corev3.TypedExtensionConfig, err error)

// Server is the xDS server. Create it with New, register it on a gRPC server
// with Register, and call Refresh after anything a Builder reads changes.
type Server struct {
	build Builder
	log   *slog.Logger
	cache cachev3.SnapshotCache
	xds   serverv3.Server

	mu       sync.Mutex
	clusters map[string]string // cluster → version of its current snapshot
}

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

// New returns a Server whose snapshots come from build.
func New(ctx context.Context, build Builder, opts ...Option) *Server {
	s := &Server{
		build:    build,
		log:      slog.New(slog.DiscardHandler),
		clusters: map[string]string{},
	}
	for _, o := range opts {
		o(s)
	}
	s.cache = cachev3.NewSnapshotCache(false, clusterHash{}, cplog.LoggerFuncs{
		DebugFunc: func(f string, a ...any) { s.log.Debug(fmt.Sprintf(f, a...), "component", "xds_cache") },
		WarnFunc:  func(f string, a ...any) { s.log.Warn(fmt.Sprintf(f, a...), "component", "xds_cache") },
		ErrorFunc: func(f string, a ...any) { s.log.Error(fmt.Sprintf(f, a...), "component", "xds_cache") },
	})
	s.xds = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: s.onStreamRequest,
	})
	return s
}

// Register serves ADS and ECDS on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(g, s.xds)
}

// clusterHash groups proxies by the Envoy node's cluster: proxies of one
// service share a snapshot.
type clusterHash struct{}

func (clusterHash) ID(node *corev3.Node) string { return node.GetCluster() }

// onStreamRequest makes sure a proxy's cluster has a snapshot before the
// cache answers its request.
func (s *Server) onStreamRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	cluster := req.GetNode().GetCluster()
	s.mu.Lock()
	_, known := s.clusters[cluster]
	s.mu.Unlock()
	if known {
		return nil
	}
	return s.refreshCluster(context.Background(), cluster)
}

// Refresh rebuilds the snapshot of every cluster seen so far and pushes
// those whose version changed.
func (s *Server) Refresh(ctx context.Context) error {
	s.mu.Lock()
	clusters := make([]string, 0, len(s.clusters))
	for c := range s.clusters {
		clusters = append(clusters, c)
	}
	s.mu.Unlock()
	var first error
	for _, c := range clusters {
		if err := s.refreshCluster(ctx, c); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Server) refreshCluster(ctx context.Context, cluster string) error {
	version, ext, err := s.build(cluster)
	if err != nil {
		return fmt.Errorf("build snapshot for cluster %q: %w", cluster, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.clusters[cluster]; ok && old == version {
		return nil
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{
		resource.ExtensionConfigType: {ext},
	})
	if err != nil {
		return fmt.Errorf("snapshot for cluster %q: %w", cluster, err)
	}
	if err := s.cache.SetSnapshot(ctx, cluster, snap); err != nil {
		return fmt.Errorf("set snapshot for cluster %q: %w", cluster, err)
	}
	s.clusters[cluster] = version
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
