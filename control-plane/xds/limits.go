package xds

import (
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/experiment"
)

// Limits on what a proxy sends. Each is enforced where the input enters,
// in the stream callbacks, before anything is tracked, logged or
// published to the mesh registry; docs/reference.md ("What proxies
// send") lists them. Identity fields over their bound are refused,
// never truncated: two proxies cut to the same prefix would be one.
const (
	// MaxRequestBytes bounds one xDS request message (grpc.MaxRecvMsgSize,
	// ServerOptions): a larger one ends its stream with RESOURCE_EXHAUSTED.
	// An Envoy DiscoveryRequest is its node (metadata and the list of
	// extensions it was built with: tens of KiB) and at most a NACK
	// message: far less.
	MaxRequestBytes = 1 << 20
	// MaxNodeBytes bounds a request's node (its protobuf size), which
	// go-control-plane keeps for the stream's life: Envoy 1.40's node is
	// 61 KB (the 516 extensions it was built with), so a quarter of
	// MaxRequestBytes leaves room for metadata and bounds what 50,000
	// streams keep to 12 GiB at worst instead of 49 GiB.
	MaxNodeBytes = 256 << 10
	// MaxNodeIDBytes bounds node.id.
	MaxNodeIDBytes = 256
	// MaxClusterBytes bounds node.cluster, the proxy's service: a
	// cluster must be a name experiments can list in their services
	// (experiment.ServiceNameProblem: the same bound and characters).
	MaxClusterBytes = experiment.MaxServiceNameBytes
	// MaxArtifactBytes bounds node.metadata["allot.artifact"] (its string,
	// or its JSON when it is not a string).
	MaxArtifactBytes = 64
	// MaxVersionBytes bounds the version_info a proxy reports. A longer
	// one, or one with characters other than letters, digits and `.`,
	// `_`, `:`, `-`, cannot be a version allotd made (16 hex digits): it is
	// ignored (the proxy runs no version allotd knows), not refused.
	MaxVersionBytes = 32
	// MaxRejectionBytes bounds the error_detail.message of a NACK as kept,
	// logged and published; the rest is cut, with a marker saying how much.
	MaxRejectionBytes = 1024
	// MaxClusters bounds the clusters one server tracks. At the bound, the
	// first proxy of a new cluster takes the place of the cluster idle the
	// longest (no stream uses it: it is in its grace period), which is
	// forgotten; it is refused with RESOURCE_EXHAUSTED only when every
	// cluster has a stream. A stream names one cluster: a request naming
	// another is refused (sameNode). It
	// bounds allotd's memory (each cluster keeps its configuration built
	// for each artifact, and its tracking: docs/reference.md, "What
	// proxies send"); the mesh registry splits a replica's clusters
	// into records of their own, so it bounds no registry record.
	MaxClusters = 10_000
	// DefaultMaxStreams is how many xDS streams one server serves at once
	// unless WithMaxStreams says otherwise. A stream counts once its first
	// request is admitted; the first request of one more is refused with
	// RESOURCE_EXHAUSTED (Envoy retries, or fails over to another
	// replica). It bounds the memory the proxies' streams take in allotd
	// (docs/reference.md, "What proxies send").
	DefaultMaxStreams = 50_000
	// MaxStreamsPerConnection bounds the streams one gRPC connection opens
	// at once (grpc.MaxConcurrentStreams, ServerOptions): an Envoy uses one
	// or two xDS streams per connection; one more waits for a free slot.
	MaxStreamsPerConnection = 16
	// FirstRequestTimeout is how long a new xDS stream may go without a
	// request (ServerOptions): then it ends with DEADLINE_EXCEEDED. Envoy
	// sends its first request as soon as the stream opens; a stream that
	// sends none is not counted against the streams' limit, and this
	// bounds how long it holds a connection's slot and its goroutines.
	FirstRequestTimeout = 10 * time.Second
)

// The fields the limits apply to, as the over-limit metric and errors name
// them.
const (
	fieldNode       = "node"
	fieldNodeID     = "node.id"
	fieldCluster    = "node.cluster"
	fieldArtifact   = "node.metadata." + ArtifactKey
	fieldVersion    = "version_info"
	fieldRejection  = "error_detail.message"
	fieldClusters   = "clusters"
	fieldStreams    = "streams"
	fieldTypeURL    = "type_url"
	actionRefused   = "refused"
	actionTruncated = "truncated"
	actionIgnored   = "ignored"
	actionEvicted   = "evicted"
)

// ServerOptions are the gRPC server options an xDS listener needs: its
// codec (codec: responses sent without copying their resources), the
// per-message bound (MaxRequestBytes), the streams per connection
// (MaxStreamsPerConnection), the end of streams that send no request
// (FirstRequestTimeout), and keepalives that find dead proxies and refuse
// pings faster than Envoy sends them. The first-request deadline is a
// chained stream interceptor: it composes with grpc.StreamInterceptor
// (mTLS's), which runs first.
func ServerOptions() []grpc.ServerOption { return serverOptions(FirstRequestTimeout) }

func serverOptions(within time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(MaxStreamsPerConnection),
		grpc.ChainStreamInterceptor(firstRequestWithin(within)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// firstRequestWithin ends a stream whose first message does not arrive
// within d with DEADLINE_EXCEEDED. go-control-plane receives a stream's
// requests in a goroutine of its own and ends the stream when a receive
// fails; no callback runs before the first request, and a server cannot
// cancel a stream's context: so the first receive is the place.
func firstRequestWithin(d time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		fs := &firstRequestStream{ServerStream: ss, within: d}
		err := handler(srv, fs)
		if fs.timedOut.Load() {
			return status.Errorf(codes.DeadlineExceeded, "xds: no request within %v of the stream's opening", d)
		}
		return err
	}
}

// firstRequestStream is a stream whose first RecvMsg fails after within.
// RecvMsg is called from one goroutine at a time (gRPC's rule); timedOut
// is read by the interceptor once the handler returned.
type firstRequestStream struct {
	grpc.ServerStream
	within   time.Duration
	received bool
	timedOut atomic.Bool
}

func (f *firstRequestStream) RecvMsg(m any) error {
	pm, ok := m.(proto.Message)
	if f.received || !ok {
		return f.ServerStream.RecvMsg(m)
	}
	// The receive goes on after a timeout until the stream ends (when the
	// handler returns): into a message of its own, never m.
	into := pm.ProtoReflect().New().Interface()
	done := make(chan error, 1)
	go func() { done <- f.ServerStream.RecvMsg(into) }()
	t := time.NewTimer(f.within)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		f.received = true
		proto.Merge(pm, into)
		return nil
	case <-t.C:
		f.timedOut.Store(true)
		return status.Errorf(codes.DeadlineExceeded, "xds: no request within %v of the stream's opening", f.within)
	}
}

// admit refuses a request (the stream ends with the returned status)
// whose node's identity or artifact is over its bound.
func (s *Server) admit(node *corev3.Node) error {
	field, why := "", ""
	switch id, cluster := node.GetId(), node.GetCluster(); {
	case proto.Size(node) > MaxNodeBytes:
		field, why = fieldNode, fmt.Sprintf("%d bytes, limit %d", proto.Size(node), MaxNodeBytes)
	case len(id) > MaxNodeIDBytes:
		field, why = fieldNodeID, fmt.Sprintf("%d bytes, limit %d", len(id), MaxNodeIDBytes)
	case cluster != "" && experiment.ServiceNameProblem(cluster) != "": // no cluster: the untargeted experiments
		field, why = fieldCluster, experiment.ServiceNameProblem(cluster)
	default:
		if a, _ := nodeArtifact(node); len(a) > MaxArtifactBytes {
			field, why = fieldArtifact, fmt.Sprintf("%d bytes, limit %d", len(a), MaxArtifactBytes)
		}
	}
	if field == "" {
		return nil
	}
	s.metrics.overLimit.WithLabelValues(field, actionRefused).Inc()
	s.log.Warn("proxy refused: node over a limit", "field", field, "why", why,
		"node_id", clip(node.GetId(), MaxNodeIDBytes), "cluster", clip(node.GetCluster(), MaxClusterBytes))
	return status.Errorf(codes.InvalidArgument, "xds: %s: %s", field, why)
}

// sameNode refuses a request whose node id or cluster differs from the
// first request's on its stream (id, cluster): a stream is one proxy,
// listed and counted under one cluster. Counted with the limits.
func (s *Server) sameNode(id, cluster string, node *corev3.Node) error {
	field, was, now := "", "", ""
	switch {
	case node.GetId() != id:
		field, was, now = fieldNodeID, id, node.GetId()
	case node.GetCluster() != cluster:
		field, was, now = fieldCluster, cluster, node.GetCluster()
	default:
		return nil
	}
	s.metrics.overLimit.WithLabelValues(field, actionRefused).Inc()
	s.log.Warn("proxy refused: its node changed within the stream", "field", field, "node_id", clip(id, MaxNodeIDBytes),
		"cluster", clip(cluster, MaxClusterBytes), "now", clip(now, MaxClusterBytes))
	return status.Errorf(codes.InvalidArgument, "xds: %s: changed within the stream from %q to %q; open a new stream", field, was, now)
}

// refuseCluster refuses the first proxy of cluster, one too many for a
// server that tracks n clusters.
func (s *Server) refuseCluster(cluster string, n int) error {
	s.metrics.overLimit.WithLabelValues(fieldClusters, actionRefused).Inc()
	s.log.Warn("proxy refused: too many clusters", "cluster", cluster, "clusters", n, "limit", s.maxClusters)
	return status.Errorf(codes.ResourceExhausted, "xds: %s: this server tracks %d clusters, the limit; the first proxy of cluster %q is refused",
		fieldClusters, n, cluster)
}

// admitStream refuses a new xDS stream, one too many for a server that
// serves n streams: counted each time, logged once until a stream is
// admitted again (a fleet retrying against a full server would flood the
// log). s.mu must be held.
func (s *Server) admitStream(n int) error {
	if n < s.maxStreams {
		s.streamsFull = false
		return nil
	}
	s.metrics.overLimit.WithLabelValues(fieldStreams, actionRefused).Inc()
	if !s.streamsFull {
		s.streamsFull = true
		s.log.Warn("proxies refused: too many xDS streams (logged once until one is admitted again)", "streams", n, "limit", s.maxStreams)
	}
	return status.Errorf(codes.ResourceExhausted, "xds: %s: this server serves %d streams, the limit; connect to another replica or retry later",
		fieldStreams, n)
}

// servedType refuses a request whose type URL the stream cannot serve: on
// a dedicated state-of-the-world ECDS stream anything but ECDS's, on an
// ADS or delta stream anything but one of go-control-plane's xDS
// resource types (only ECDS resources are ever in allotd's snapshots;
// another type gets none).
// It bounds what one stream can make the server hold: go-control-plane's
// ordered ADS loop buffers one response per type, and its channel holds
// one of each xDS type; the cache sends to it while holding its lock, so
// pending responses to more types than that could block every stream's
// watch behind one stream.
func (s *Server) servedType(api, node, typeURL string) error {
	why := ""
	switch {
	case api == APIECDS && typeURL != resource.ExtensionConfigType:
		why = fmt.Sprintf("%q on an ECDS stream, which serves %s only", clip(typeURL, maxTypeURLShown), resource.ExtensionConfigType)
	case cachev3.GetResponseType(typeURL) == types.UnknownType:
		why = fmt.Sprintf("%q is not an xDS resource type", clip(typeURL, maxTypeURLShown))
	default:
		return nil
	}
	s.metrics.overLimit.WithLabelValues(fieldTypeURL, actionRefused).Inc()
	s.log.Warn("proxy refused: a resource type its stream does not serve", "field", fieldTypeURL, "why", why,
		"node_id", clip(node, MaxNodeIDBytes), "api", api)
	return status.Errorf(codes.InvalidArgument, "xds: %s: %s", fieldTypeURL, why)
}

// maxTypeURLShown bounds the type URL an error or log line repeats.
const maxTypeURLShown = 128

// version is v if it may be a version allotd made (MaxVersionBytes), else
// "" (counted).
func (s *Server) version(v string) string {
	if v == "" || plausibleVersion(v) {
		return v
	}
	s.metrics.overLimit.WithLabelValues(fieldVersion, actionIgnored).Inc()
	return ""
}

func plausibleVersion(v string) bool {
	if len(v) > MaxVersionBytes {
		return false
	}
	for i := range len(v) {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// rejection is a NACK's message bounded to MaxRejectionBytes (counted when
// cut).
func (s *Server) rejection(msg string) string {
	if len(msg) <= MaxRejectionBytes {
		return msg
	}
	s.metrics.overLimit.WithLabelValues(fieldRejection, actionTruncated).Inc()
	return clip(msg, MaxRejectionBytes)
}

// clip cuts s to at most limit bytes plus a marker saying how many were
// cut, at a UTF-8 boundary.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [truncated %d bytes]", s[:cut], len(s)-cut)
}
