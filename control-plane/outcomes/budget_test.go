package outcomes

import (
	"context"
	"net"
	"testing"
	"time"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TestExportBudgetPerConnection: MaxExportsPerSecond is each connection's
// budget. A proxy of cluster payments that subscribed under the node id
// of checkout's proxy b-1 (allowed by a policy that proves the cluster
// alone) spends its own connection's budget, not b-1's; neither does a
// flood of connections refuse b-1's exports; b-1's own budget still binds
// it; the next second starts over.
func TestExportBudgetPerConnection(t *testing.T) {
	f := newFixture(t, `{"key":"checkout","variations":["a","b"],"observe":true,"services":["checkout"],"assignmentRevision":1}`)
	b1 := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
	impostor := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40000}
	s := NewSink(f.a, func(addr string) (string, string, bool) {
		switch addr {
		case b1.String():
			return "b-1", "checkout", true
		case impostor.String():
			return "b-1", "payments", true
		}
		return "flood-" + addr, "payments", true
	})
	export := func(addr *net.TCPAddr) error {
		t.Helper()
		_, err := s.Export(peer.NewContext(context.Background(), &peer.Peer{Addr: addr}), &collectorv1.ExportMetricsServiceRequest{ResourceMetrics: []*metricsv1.ResourceMetrics{{
			ScopeMetrics: []*metricsv1.ScopeMetrics{{Metrics: []*metricsv1.Metric{counter(name(0, "2xx"), 1)}}}}}})
		return err
	}

	refused := 0
	for range 2 * MaxExportsPerSecond {
		switch err := export(impostor); status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("impostor's export: %v", err)
		}
	}
	if refused != MaxExportsPerSecond {
		t.Errorf("impostor: %d of %d exports in a second refused, want %d", refused, 2*MaxExportsPerSecond, MaxExportsPerSecond)
	}
	// 20,000 connections (twice what one second once admitted in all)
	// export within the same second: the sink refuses none of them, and
	// none of b-1's.
	for i := range 20_000 {
		if err := export(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i/250), byte(i%250)), Port: 30000 + i}); err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
	}
	for i := range MaxExportsPerSecond {
		if err := export(b1); err != nil {
			t.Fatalf("b-1's export %d of %d in the second: %v", i+1, MaxExportsPerSecond, err)
		}
	}
	if err := export(b1); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("b-1's export %d in a second: %v, want ResourceExhausted", MaxExportsPerSecond+1, err)
	}
	if got := f.report(t, "checkout", 1).GetTotal()[0].GetRequests(); got != MaxExportsPerSecond {
		t.Errorf("checkout: %d requests counted, want b-1's %d (the impostor's and the flood's are of cluster payments)", got, MaxExportsPerSecond)
	}
	f.clock.Add(time.Second)
	if err := export(impostor); err != nil {
		t.Errorf("impostor's export in the next second: %v", err)
	}
}
