package xds

import (
	"context"
	"log/slog"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/peer"

	"github.com/allotmesh/allot/control-plane/rollout"
)

// A proxy is rollout.StateUnserved when its node metadata names a filter
// artifact the server does not serve (ArtifactKey): it is sent no
// configuration and keeps running whatever its bootstrap gave it; the
// server never guesses an artifact for it.

// API names of the xDS services a proxy may use.
const (
	// APIADS is the aggregated discovery service (envoy-configs/sidecar.yaml).
	APIADS = "ads"
	// APIECDS is the dedicated extension config discovery service.
	APIECDS = "ecds"
)

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
	rejected  *rollout.Rejection
}

// state is where st stands with version target.
func (st *stream) state(target string) rollout.State {
	switch {
	case st.unserved != "":
		return rollout.StateUnserved
	case target != "" && st.acked == target:
		return rollout.StateApplied
	case target != "" && st.rejected != nil && st.rejected.Version == target:
		return rollout.StateRejected
	}
	return rollout.StatePending
}

func (st *stream) status(target string) rollout.ProxyStatus {
	p := rollout.ProxyStatus{
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

// Proxies returns every connected proxy that has identified itself, sorted
// by cluster, node id and stream, with its state against its cluster's
// current version.
func (s *Server) Proxies() []rollout.ProxyStatus {
	out := s.AppendProxies(nil)
	rollout.SortProxies(out)
	return out
}

// AppendProxies appends what Proxies returns to dst, in no particular
// order, for a caller that keys them by node and stream and reuses dst
// (the mesh registry, after every change): sorting and allocating
// thousands of proxies cost more than copying them.
func (s *Server) AppendProxies(dst []rollout.ProxyStatus) []rollout.ProxyStatus {
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

// ConnProxy returns the proxy whose identified xDS streams are open on the
// connection from addr (a gRPC peer's remote address), with its state
// against its cluster's current version: how another service on the xDS
// listener (the outcomes sink) learns, from the connection a call arrived
// on, which proxy made it — an identity its xDS streams established, under
// the listener's TLS and mTLS rules. ok is false when no identified
// stream is open on that connection, or when its streams name different
// nodes or clusters (a client that is no one proxy).
func (s *Server) ConnProxy(addr string) (p rollout.ProxyStatus, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sts := s.conns[addr]
	if len(sts) == 0 {
		return rollout.ProxyStatus{}, false
	}
	for _, o := range sts[1:] {
		if o.node != sts[0].node || o.cluster != sts[0].cluster {
			return rollout.ProxyStatus{}, false
		}
	}
	// The state of the connection's latest stream (an ECDS stream and an
	// ADS one of the same proxy, or a stream replacing one, agree once
	// acknowledged).
	st := sts[len(sts)-1]
	return st.status(s.clusters[st.cluster]), true
}

// Unsettled counts the proxies still pending their cluster's current
// version (neither applied nor rejected it, and served), or returns a
// positive lower bound of that count: a publisher asks it after every
// wake-up in a rollout, and counting every proxy each time would cost the
// fleet's size per ACK. Each change (notify) settles one proxy at most,
// except a cluster's new or forgotten version (resetPending), so the last
// count minus the changes since is a lower bound; it counts again once
// that reaches 0.
func (s *Server) Unsettled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingFloor > 0 {
		return s.pendingFloor
	}
	n := 0
	for _, st := range s.streams {
		if st.identified && st.state(s.clusters[st.cluster]) == rollout.StatePending {
			n++
		}
	}
	s.pendingFloor = n
	return n
}

// Joins counts the streams that identified themselves (sent a first
// request that was admitted) since the server started: a proxy that
// connects, or reconnects on a new stream, adds one. A replica whose
// record said every proxy of its had applied what it serves must take it
// back at once when this moves (reconcile.Publish); a new version alone
// leaves that record true of the writes before it.
func (s *Server) Joins() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joins
}

// Changes returns a channel that is closed at the next change of any
// proxy's or cluster's state (a connect, disconnect, push, ACK, NACK or new
// snapshot).
func (s *Server) Changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changesLocked()
}

// changesLocked is Changes with s.mu held.
func (s *Server) changesLocked() <-chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// Recount returns a channel closed when Unsettled may count fewer than
// the lower bound it returned last (that bound ran out: it counts again),
// or when a stream joins (Joins): a publisher waiting for its proxies to
// settle wakes a few times in a rollout rather than at every push and ACK.
func (s *Server) Recount() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recount
}

// notify closes the channel Changes returned, if any: a push or ACK
// nobody waits for makes none. s.mu must be held.
func (s *Server) notify() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	if s.pendingFloor > 0 {
		s.pendingFloor--
		if s.pendingFloor == 0 {
			s.wakeRecount()
		}
	}
}

// resetPending makes Unsettled count again (a cluster's version changed,
// or a stream joined); s.mu must be held.
func (s *Server) resetPending() {
	s.pendingFloor = 0
	s.wakeRecount()
}

// wakeRecount closes the channel Recount returned; s.mu must be held.
func (s *Server) wakeRecount() {
	close(s.recount)
	s.recount = make(chan struct{})
}

// onStreamOpen tracks a new stream. It is counted against the server's
// limit of streams (admitStream) only once its first request is admitted
// (track): a stream that sends none takes no proxy's place, and is ended
// after FirstRequestTimeout (ServerOptions).
func (s *Server) onStreamOpen(ctx context.Context, id int64, typeURL string) error {
	st := &stream{id: id, api: APIECDS, connectedAt: s.now()}
	st.lastSeen = st.connectedAt
	if typeURL == resource.AnyType && ctx.Value(ecdsStreamKey{}) == nil {
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
		if c := slices.DeleteFunc(s.conns[st.addr], func(o *stream) bool { return o == st }); len(c) > 0 {
			s.conns[st.addr] = c
		} else {
			delete(s.conns, st.addr)
		}
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
		return s.servedType("", req.GetNode().GetId(), req.GetTypeUrl())
	}
	node := st.node
	if !st.identified {
		node = req.GetNode().GetId()
	}
	if err := s.servedType(st.api, node, req.GetTypeUrl()); err != nil {
		return err
	}
	joined := !st.identified
	if !joined {
		if err := s.sameNode(st.node, st.cluster, req.GetNode()); err != nil {
			return err
		}
	} else {
		if err := s.admitStream(s.admitted); err != nil {
			return err
		}
		s.admitted++
		s.joins++
		s.resetPending()
		st.identified = true
		st.node, st.cluster = req.GetNode().GetId(), req.GetNode().GetCluster()
		if st.addr != "" {
			s.conns[st.addr] = append(s.conns[st.addr], st)
		}
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
		if joined {
			s.notify() // a publisher learns of it (Joins)
		}
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
		// Answers an older response (of another stream, if it joined):
		// the server ignores it too.
		if !joined {
			return nil
		}
	case req.GetErrorDetail() != nil:
		st.rejected = &rollout.Rejection{Version: st.sent, Error: s.rejection(req.GetErrorDetail().GetMessage()), At: now}
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
		if !joined {
			return nil
		}
	}
	s.notify() // an ACK, a NACK, or a stream that joined (Joins)
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
