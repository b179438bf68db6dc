package xds

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/peer"

	"github.com/allotmesh/allot/control-plane/mesh"
)

// State is where a proxy stands with the configuration it should run; the
// states are the mesh package's, shared by every replica.
type State = mesh.State

// The states of a proxy.
const (
	// StateApplied: the proxy acknowledged (ACK) the configuration.
	StateApplied = mesh.StateApplied
	// StatePending: the proxy has not answered the configuration yet.
	StatePending = mesh.StatePending
	// StateRejected: the proxy refused the configuration (NACK) and keeps
	// running its previous one.
	StateRejected = mesh.StateRejected
	// StateUnserved: the proxy's node metadata names a filter artifact the
	// server does not serve (ArtifactKey), so it is sent no configuration
	// and keeps running whatever its bootstrap gave it; ProxyStatus.Error
	// says why. The server never guesses an artifact for it.
	StateUnserved = mesh.StateUnserved
)

// API names of the xDS services a proxy may use.
const (
	// APIADS is the aggregated discovery service (envoy-configs/sidecar.yaml).
	APIADS = "ads"
	// APIECDS is the dedicated extension config discovery service.
	APIECDS = "ecds"
)

// Rejection is a configuration version a proxy refused.
type Rejection = mesh.Rejection

// ProxyStatus is one connected proxy, i.e. one xDS stream, as the server
// sees it.
type ProxyStatus struct {
	// Replica is the allotd replica the proxy is connected to ("" for this
	// server's own proxies when it runs alone).
	Replica string `json:"replica,omitempty"`
	// NodeID is the Envoy node id (--service-node).
	NodeID string `json:"node_id"`
	// Cluster is the Envoy node cluster (--service-cluster): the service.
	Cluster string `json:"cluster"`
	// Address is the stream's peer address.
	Address string `json:"address"`
	// Stream identifies the xDS stream within this server process.
	Stream int64 `json:"stream"`
	// API is APIADS or APIECDS.
	API string `json:"api"`
	// Artifact is the filter artifact the proxy runs, from its node
	// metadata (ArtifactWasm when absent), as the proxy gave it.
	Artifact string `json:"artifact"`
	// Target is the version the proxy should run: its cluster's current
	// version (in a Rollout, possibly a later one than the waited-for target).
	Target string `json:"target"`
	// State is where the proxy stands with Target.
	State State `json:"state"`
	// Sent is the version last sent on the stream, SentAt when.
	Sent   string    `json:"sent,omitempty"`
	SentAt time.Time `json:"sent_at,omitzero"`
	// Pushes counts the configurations sent on the stream.
	Pushes int `json:"pushes"`
	// Acked is the version the proxy last acknowledged (or reported running
	// when it connected), AckedAt when.
	Acked   string    `json:"acked,omitempty"`
	AckedAt time.Time `json:"acked_at,omitzero"`
	// Rejected is the last configuration the proxy refused on this stream.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Error says why an unserved proxy (StateUnserved) gets no
	// configuration.
	Error string `json:"error,omitempty"`
	// ConnectedAt is when the stream opened; LastSeen when the proxy last
	// sent a request.
	ConnectedAt time.Time `json:"connected_at"`
	LastSeen    time.Time `json:"last_seen"`
}

// stream is the tracking state of one xDS stream; guarded by Server.mu.
type stream struct {
	id          int64
	api         string
	addr        string
	connectedAt time.Time
	lastSeen    time.Time
	node        string
	cluster     string
	identified  bool // its first request arrived and was admitted: counted against maxStreams and in users
	artifact    string
	unserved    string // why the proxy's artifact is not served ("": it is)

	sent      string
	sentNonce string
	sentAt    time.Time
	pushes    int
	acked     string
	ackedAt   time.Time
	rejected  *Rejection
}

// state is where st stands with version target.
func (st *stream) state(target string) State {
	switch {
	case st.unserved != "":
		return StateUnserved
	case target != "" && st.acked == target:
		return StateApplied
	case target != "" && st.rejected != nil && st.rejected.Version == target:
		return StateRejected
	}
	return StatePending
}

func (st *stream) status(target string) ProxyStatus {
	p := ProxyStatus{
		NodeID: st.node, Cluster: st.cluster, Address: st.addr, Stream: st.id, API: st.api,
		Artifact: st.artifact, Target: target, State: st.state(target), Error: st.unserved,
		Sent: st.sent, SentAt: st.sentAt, Pushes: st.pushes,
		Acked: st.acked, AckedAt: st.ackedAt,
		ConnectedAt: st.connectedAt, LastSeen: st.lastSeen,
	}
	if st.rejected != nil {
		r := *st.rejected
		p.Rejected = &r
	}
	return p
}

// SortProxies sorts proxies by cluster, node id and stream, the order of
// every listing of them.
func SortProxies(ps []ProxyStatus) {
	slices.SortFunc(ps, func(a, b ProxyStatus) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Stream, b.Stream))
	})
}

// Proxies returns every connected proxy that has identified itself, sorted
// by cluster, node id and stream, with its state against its cluster's
// current version.
func (s *Server) Proxies() []ProxyStatus {
	out := s.AppendProxies(nil)
	SortProxies(out)
	return out
}

// AppendProxies appends what Proxies returns to dst, in no particular
// order, for a caller that keys them by node and stream and reuses dst
// (the mesh registry, after every change): sorting and allocating
// thousands of proxies cost more than copying them.
func (s *Server) AppendProxies(dst []ProxyStatus) []ProxyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = slices.Grow(dst, len(s.streams))
	for _, st := range s.streams {
		if st.identified {
			dst = append(dst, st.status(s.clusters[st.cluster]))
		}
	}
	return dst
}

// Changes returns a channel that is closed at the next change of any
// proxy's or cluster's state (a connect, disconnect, push, ACK, NACK or new
// snapshot).
func (s *Server) Changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// notify wakes every WaitFor; s.mu must be held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// onStreamOpen tracks a new stream. It is counted against the server's
// limit of streams (admitStream) only once its first request is admitted
// (track): a stream that sends none takes no proxy's place, and is ended
// after FirstRequestTimeout (ServerOptions).
func (s *Server) onStreamOpen(ctx context.Context, id int64, typeURL string) error {
	st := &stream{id: id, api: APIECDS, connectedAt: s.now()}
	st.lastSeen = st.connectedAt
	if typeURL == resource.AnyType {
		st.api = APIADS
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		st.addr = p.Addr.String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[id] = st
	return nil
}

func (s *Server) onStreamClosed(id int64, _ *corev3.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[id]
	if !ok {
		return
	}
	s.dropLocked(st)
	if st.identified {
		s.log.Info("proxy disconnected", "node_id", st.node, "cluster", st.cluster, "stream", id, "acked", st.acked)
	}
}

// untrack forgets stream id, whose request was refused: its stream ends
// and it is never listed.
func (s *Server) untrack(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[id]; ok {
		s.dropLocked(st)
	}
}

// dropLocked forgets stream st: it no longer counts against maxStreams,
// nor uses its cluster (the cluster's idle clock starts when its last
// user goes: useLocked). s.mu must be held.
func (s *Server) dropLocked(st *stream) {
	delete(s.streams, st.id)
	if st.identified {
		s.admitted--
		s.useLocked(st.cluster, -1)
	}
	s.notify()
}

// useLocked counts a stream more (delta 1) or less (-1) using cluster:
// while one does, the cluster is never forgotten; when the last one goes,
// its idle clock starts (forgetIdle). s.mu must be held.
func (s *Server) useLocked(cluster string, delta int) {
	n := s.users[cluster] + delta
	if n > 0 {
		s.users[cluster] = n
		delete(s.idle, cluster)
		return
	}
	delete(s.users, cluster)
	if _, ok := s.clusters[cluster]; ok {
		s.idle[cluster] = s.now()
	}
}

// track records what a request tells about its proxy: who it is, and
// whether it acknowledges or rejects the last configuration sent. The
// first request identifies the stream, which then counts against the
// server's limit of streams (admitStream); a later request naming another
// node id or cluster is refused (sameNode).
func (s *Server) track(id int64, req *discoveryv3.DiscoveryRequest) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[id]
	if !ok {
		return nil
	}
	if st.identified {
		if err := s.sameNode(st.node, st.cluster, req.GetNode()); err != nil {
			return err
		}
	} else {
		if err := s.admitStream(s.admitted); err != nil {
			return err
		}
		s.admitted++
		st.identified = true
		st.node, st.cluster = req.GetNode().GetId(), req.GetNode().GetCluster()
		s.useLocked(st.cluster, 1) // in use before it is ensured (see forgetIdle)
		a, err := nodeArtifact(req.GetNode())
		st.artifact, st.unserved = a, s.hash.unservedReason(a, err, s.served)
		s.log.Info("proxy connected", "node_id", st.node, "cluster", st.cluster, "artifact", st.artifact, "stream", id,
			"address", st.addr, "api", st.api, "version", clip(req.GetVersionInfo(), MaxVersionBytes))
		if st.unserved != "" {
			s.log.Warn("proxy runs an artifact this server does not serve", "node_id", st.node, "cluster", st.cluster,
				"artifact", st.artifact, "error", st.unserved)
		}
	}
	st.lastSeen = now
	if req.GetTypeUrl() != resource.ExtensionConfigType {
		return nil
	}
	switch {
	case req.GetResponseNonce() == "":
		// The first request of the stream says what the proxy runs, e.g. after
		// a reconnect; nothing sent here yet.
		if v := s.version(req.GetVersionInfo()); v != "" {
			st.acked, st.ackedAt = v, now
		}
	case req.GetResponseNonce() != st.sentNonce:
		// Answers an older response; the server ignores it too.
		return nil
	case req.GetErrorDetail() != nil:
		st.rejected = &Rejection{Version: st.sent, Error: s.rejection(req.GetErrorDetail().GetMessage()), At: now}
		s.metrics.nacks.Inc()
		s.log.Warn("proxy rejected configuration", "node_id", st.node, "cluster", st.cluster, "version", st.sent,
			"running", clip(req.GetVersionInfo(), MaxVersionBytes), "error", st.rejected.Error)
	case req.GetVersionInfo() == st.sent:
		st.acked, st.ackedAt = st.sent, now
		if since, ok := s.since[st.cluster]; ok && s.clusters[st.cluster] == st.sent {
			s.metrics.ackLatency.Observe(now.Sub(since).Seconds())
		}
		// LogAttrs: no argument is boxed when debug is off (every ACK).
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "proxy applied configuration",
			slog.String("node_id", st.node), slog.String("cluster", st.cluster), slog.String("version", st.sent))
	default:
		return nil
	}
	s.notify()
	return nil
}

func (s *Server) onStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	if resp.GetTypeUrl() != resource.ExtensionConfigType {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.metrics.pushes.Inc()
	st, ok := s.streams[id]
	if !ok {
		return
	}
	st.sent, st.sentNonce, st.sentAt = resp.GetVersionInfo(), resp.GetNonce(), now
	st.pushes++
	s.log.LogAttrs(context.Background(), slog.LevelDebug, "configuration sent", slog.String("node_id", st.node),
		slog.String("cluster", st.cluster), slog.String("version", st.sent), slog.String("nonce", st.sentNonce))
	s.notify()
}
