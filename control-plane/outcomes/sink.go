package outcomes

import (
	"errors"
	"io"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/service/metrics/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/xds"
)

// Sink is envoy.service.metrics.v3.MetricsService over an Aggregator: the
// receiving end of Envoy's metrics_service stat sink. Register it on the
// xDS listener's gRPC server, whose stream interceptor (mtls) authorizes
// the node of each stream's first message as it does an xDS stream's.
type Sink struct {
	metricsv3.UnimplementedMetricsServiceServer
	a *Aggregator
}

// NewSink returns the MetricsService feeding a.
func NewSink(a *Aggregator) *Sink { return &Sink{a: a} }

// Register registers the sink on g.
func (s *Sink) Register(g grpc.ServiceRegistrar) { metricsv3.RegisterMetricsServiceServer(g, s) }

// StreamMetrics receives one proxy's flushes until it closes the stream.
// The first message must name the node (Envoy sends it there only); a
// stream without it, or with a node id over xds.MaxNodeIDBytes, is refused
// with INVALID_ARGUMENT; one over MaxStreamsPerProxy, MaxStreams or
// MaxProxies with RESOURCE_EXHAUSTED.
func (s *Sink) StreamMetrics(st grpc.ClientStreamingServer[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse]) error {
	first, err := st.Recv()
	if err != nil {
		return eof(st, err)
	}
	node := first.GetIdentifier().GetNode()
	if node.GetId() == "" {
		s.a.dropped.WithLabelValues(reasonIdentity).Add(float64(len(first.GetEnvoyMetrics())))
		return status.Error(codes.InvalidArgument, "metrics: identifier.node.id: the first message must name the node")
	}
	id, cluster := node.GetId(), node.GetCluster()
	if len(id) > xds.MaxNodeIDBytes {
		s.a.dropped.WithLabelValues(reasonIdentity).Add(float64(len(first.GetEnvoyMetrics())))
		return status.Errorf(codes.InvalidArgument, "metrics: identifier.node.id: %d bytes, limit %d", len(id), xds.MaxNodeIDBytes)
	}
	switch reason := s.a.open(id); reason {
	case "":
	case reasonStreams:
		s.a.dropped.WithLabelValues(reason).Add(float64(len(first.GetEnvoyMetrics())))
		return status.Errorf(codes.ResourceExhausted, "metrics: node %q: streams over the limit (%d per node, %d in all)", id, MaxStreamsPerProxy, MaxStreams)
	default:
		s.a.dropped.WithLabelValues(reason).Add(float64(len(first.GetEnvoyMetrics())))
		return status.Errorf(codes.ResourceExhausted, "metrics: %d proxies report already, limit %d", MaxProxies, MaxProxies)
	}
	defer s.a.close(id)
	for m := first; ; {
		s.a.messages.Inc()
		s.a.bytes.Add(float64(proto.Size(m)))
		s.a.Add(st.Context(), id, cluster, m.GetEnvoyMetrics())
		if m, err = st.Recv(); err != nil {
			return eof(st, err)
		}
	}
}

// eof ends a stream: a clean end of the client's messages is answered.
func eof(st grpc.ClientStreamingServer[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse], err error) error {
	if errors.Is(err, io.EOF) {
		return st.SendAndClose(&metricsv3.StreamMetricsResponse{})
	}
	return err
}
