package outcomes

import (
	"context"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// IdentifyFunc names the proxy whose xDS streams are open on the
// connection from addr (xds.Server.ConnProxy): its node id and its
// cluster; ok is false when no one proxy is identified on that connection.
type IdentifyFunc func(addr string) (node, cluster string, ok bool)

// Sink is opentelemetry.proto.collector.metrics.v1.MetricsService over an
// Aggregator: the receiving end of Envoy's OpenTelemetry stat sink
// (envoy.stat_sinks.open_telemetry), which the bootstraps point at the
// allot_xds cluster with a matcher that drops every stat but Allot's
// outcome stats. Register it on the xDS listener's gRPC server.
//
// An OTLP export carries no node: a call is the proxy's whose xDS streams
// are open on the same connection (Envoy sends the sink's calls and its
// xDS streams to the allot_xds cluster over one HTTP/2 connection), so
// it is authenticated and authorized exactly as those streams were, under
// the listener's TLS and mTLS rules. A call on a connection without one
// identified proxy is refused (UNAUTHENTICATED) and its data points
// dropped (reason "identity").
type Sink struct {
	collectorv1.UnimplementedMetricsServiceServer
	a        *Aggregator
	identify IdentifyFunc
}

// NewSink returns the MetricsService feeding a with the proxies identify
// names.
func NewSink(a *Aggregator, identify IdentifyFunc) *Sink { return &Sink{a: a, identify: identify} }

// Register registers the sink on g.
func (s *Sink) Register(g grpc.ServiceRegistrar) { collectorv1.RegisterMetricsServiceServer(g, s) }

// Export takes one flush (or one part of it) of the calling proxy. A call
// with more than MaxPointsPerExport data points, or over
// MaxExportsPerSecond on its connection, is refused (RESOURCE_EXHAUSTED),
// its data dropped and counted; the proxy's next flush is taken as usual.
func (s *Sink) Export(ctx context.Context, req *collectorv1.ExportMetricsServiceRequest) (*collectorv1.ExportMetricsServiceResponse, error) {
	var ms []*metricsv1.Metric
	n := 0 // data points
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				n += points(m)
				if n <= MaxPointsPerExport {
					ms = append(ms, m)
				}
			}
		}
	}
	s.a.messages.Inc()
	s.a.bytes.Add(float64(proto.Size(req)))
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	node, cluster, ok := s.identify(addr)
	switch {
	case !ok:
		s.a.dropped.WithLabelValues(reasonIdentity).Add(float64(n))
		return nil, status.Error(codes.Unauthenticated, "metrics: no proxy's xDS stream is open on this connection: send the stat sink's exports to the allot_xds cluster, which carries the proxy's xDS streams")
	case n > MaxPointsPerExport:
		s.a.dropped.WithLabelValues(reasonSize).Add(float64(n))
		return nil, status.Errorf(codes.ResourceExhausted, "metrics: resource_metrics: %d data points, limit %d per export (the sink's max_data_points_per_request)", n, MaxPointsPerExport)
	case !s.a.admit(addr):
		s.a.dropped.WithLabelValues(reasonRate).Add(float64(n))
		return nil, status.Errorf(codes.ResourceExhausted, "metrics: connection %s (node %.256q, cluster %q): over %d exports per second",
			addr, node, cluster, MaxExportsPerSecond)
	}
	s.a.Add(ctx, node, cluster, ms)
	return &collectorv1.ExportMetricsServiceResponse{}, nil
}

// points counts m's data points.
func points(m *metricsv1.Metric) int {
	return len(m.GetSum().GetDataPoints()) + len(m.GetHistogram().GetDataPoints()) + len(m.GetGauge().GetDataPoints()) +
		len(m.GetExponentialHistogram().GetDataPoints()) + len(m.GetSummary().GetDataPoints())
}
