package outcomes

import (
	"context"
	"testing"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// TestOneSeriesBoundedPerExport: MaxDelta bounds one counter delta of one
// flush, and an export counts each series once (Envoy never repeats one):
// an export of MaxPointsPerExport copies of one series adds at most
// MaxDelta, the copies dropped (reason "value").
func TestOneSeriesBoundedPerExport(t *testing.T) {
	f := newFixture(t, checkout)
	s := NewSink(f.a, func(string) (string, string, bool) { return "p1", "shop", true })
	var ms []*metricsv1.Metric
	for range MaxPointsPerExport {
		ms = append(ms, counter(name(0, "2xx"), MaxDelta))
	}
	req := &collectorv1.ExportMetricsServiceRequest{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		ScopeMetrics: []*metricsv1.ScopeMetrics{{Metrics: ms}}}}}
	if _, err := s.Export(context.Background(), req); err != nil {
		t.Logf("export refused: %v", err)
	}
	if got := f.report(t, "checkout", 1).GetTotal()[0].GetRequests(); got > MaxDelta {
		t.Errorf("one export added %d requests to one series (%d× MaxDelta), want at most MaxDelta %d", got, got/MaxDelta, int64(MaxDelta))
	}
}
