package xds

import (
	"fmt"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/allotmesh/allot/control-plane/experiment"
)

// Limits on what a proxy sends. Each is enforced where the input enters,
// in the stream callbacks, before anything is tracked, logged or
// published to the mesh registry; control-plane/README.md ("Limits on what
// proxies send") lists them. Identity fields over their bound are refused,
// never truncated: two proxies cut to the same prefix would be one.
const (
	// MaxRequestBytes bounds one xDS request message (grpc.MaxRecvMsgSize,
	// ServerOptions): a larger one ends its stream with RESOURCE_EXHAUSTED.
	// An Envoy DiscoveryRequest is its node (metadata and the list of
	// extensions it was built with: tens of KiB) and at most a NACK
	// message: far less.
	MaxRequestBytes = 1 << 20
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
	// MaxClusters bounds the clusters one server tracks: the first proxy
	// of a new cluster beyond it is refused with RESOURCE_EXHAUSTED. It
	// bounds allotd's memory (each cluster keeps its configuration built
	// for each artifact, and its tracking: control-plane/README.md, "Limits
	// on what proxies send"); the mesh registry splits a replica's clusters
	// into records of their own, so it bounds no registry record.
	MaxClusters = 10_000
	// DefaultMaxStreams is how many xDS streams one server serves at once
	// unless WithMaxStreams says otherwise: one more is refused with
	// RESOURCE_EXHAUSTED (Envoy retries, or fails over to another
	// replica). It bounds the memory the proxies' streams take in allotd
	// (control-plane/README.md, "Limits on what proxies send").
	DefaultMaxStreams = 50_000
)

// The fields the limits apply to, as the over-limit metric and errors name
// them.
const (
	fieldNodeID     = "node.id"
	fieldCluster    = "node.cluster"
	fieldArtifact   = "node.metadata." + ArtifactKey
	fieldVersion    = "version_info"
	fieldRejection  = "error_detail.message"
	fieldClusters   = "clusters"
	fieldStreams    = "streams"
	actionRefused   = "refused"
	actionTruncated = "truncated"
	actionIgnored   = "ignored"
)

// ServerOptions are the gRPC server options an xDS listener needs: the
// per-message bound (MaxRequestBytes) and keepalives that find dead
// proxies and refuse pings faster than Envoy sends them.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// admit refuses a request (the stream ends with the returned status)
// whose node's identity or artifact is over its bound.
func (s *Server) admit(node *corev3.Node) error {
	field, why := "", ""
	switch id, cluster := node.GetId(), node.GetCluster(); {
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
