// Package xdsfloor is the replicas section's floor: the least an xDS server
// built on go-control-plane does to push a new ECDS resource to a fleet and
// know that every proxy applied it. One process, one snapshot cache, one
// snapshot that every proxy shares, and a count of the proxies' ACKs in the
// stream callbacks — no store, no registry, no replicas, no admin API.
//
// Push sets a snapshot holding the resource it is given (the bench hands it
// Allot's own, as a simulated proxy received it, so both servers send the
// same bytes) and returns once every open stream acknowledged it: the bare
// go-control-plane push a waited write of Allot's is compared with.
package xdsfloor

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// snapshotKey is the one snapshot every proxy shares: Allot's fleet in the
// section is one cluster running one artifact, which Allot serves one
// snapshot too.
const snapshotKey = "floor"

type oneHash struct{}

func (oneHash) ID(*corev3.Node) string { return snapshotKey }

// Server is the floor's xDS server (ADS and ECDS streams).
type Server struct {
	cache cachev3.SnapshotCache
	xds   serverv3.Server

	pushMu sync.Mutex // one push at a time
	n      int        // pushes so far: the versions are v1, v2, ...

	mu      sync.Mutex
	acked   map[int64]string // stream with a request → the version it acknowledged last
	target  string           // the version being pushed
	done    int              // streams in acked that acknowledged target
	settled chan struct{}    // closed when done reaches len(acked)
}

// New returns a Server whose streams end with ctx.
func New(ctx context.Context) *Server {
	s := &Server{cache: cachev3.NewSnapshotCache(false, oneHash{}, nil), acked: map[int64]string{}}
	s.xds = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: s.onRequest,
		StreamClosedFunc:  s.onClosed,
	})
	return s
}

// Register serves ADS and ECDS on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(g, s.xds)
}

// onRequest counts a stream from its first request on, and its ACK of the
// version being pushed: a request answering a response (a nonce) without an
// error detail acknowledges the version it carries.
func (s *Server) onRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	was, known := s.acked[id]
	v := was
	if req.GetResponseNonce() != "" && req.GetErrorDetail() == nil {
		v = req.GetVersionInfo()
	}
	s.acked[id] = v
	if s.target != "" && v == s.target && (!known || was != s.target) {
		s.done++
	}
	s.checkLocked()
	return nil
}

func (s *Server) onClosed(id int64, _ *corev3.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.acked[id]
	if !ok {
		return
	}
	delete(s.acked, id)
	if s.target != "" && v == s.target {
		s.done--
	}
	s.checkLocked()
}

// checkLocked closes settled once every counted stream acknowledged the
// target; s.mu must be held.
func (s *Server) checkLocked() {
	if s.settled != nil && s.done >= len(s.acked) {
		close(s.settled)
		s.settled = nil
	}
}

// Streams is the number of streams that sent a request and are open.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// Push sets a snapshot of ext under the next version and waits until every
// open stream acknowledged it (streams that close drop out), or ctx ends.
// It returns the version and how many streams acknowledged it.
func (s *Server) Push(ctx context.Context, ext *corev3.TypedExtensionConfig) (string, int, error) {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	s.n++
	version := "v" + strconv.Itoa(s.n)
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ExtensionConfigType: {ext}})
	if err != nil {
		return version, 0, err
	}
	settled := make(chan struct{})
	s.mu.Lock()
	s.target, s.done, s.settled = version, 0, settled
	s.checkLocked() // no stream: nothing to wait for
	s.mu.Unlock()
	if err := s.cache.SetSnapshot(ctx, snapshotKey, snap); err != nil {
		return version, 0, err
	}
	select {
	case <-settled:
	case <-ctx.Done():
		s.mu.Lock()
		n, all := s.done, len(s.acked)
		s.settled = nil
		s.mu.Unlock()
		return version, n, fmt.Errorf("%d of %d streams acknowledged %s: %w", n, all, version, ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return version, s.done, nil
}
