//go:build e2e && reliability

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// impostor is an xDS client with a valid certificate for identity that
// subscribes as node of cluster and then exports to the outcomes sink on
// its connection without pause (empty exports: what it says does not
// matter, what it spends does), until the test ends. It counts the
// exports allotd took and refused.
type impostor struct {
	admitted, refused atomic.Int64
}

func (m *mtlsSystem) impostor(identity, node, cluster string) *impostor {
	m.t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", m.xdsPort), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: m.serverCA.Pool(), Certificates: []tls.Certificate{m.proxyCA.Client(m.t, identity).TLS}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	m.t.Cleanup(func() { cancel(); <-done; conn.Close() })
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = ads.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node, Cluster: cluster},
			TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
	}
	if err == nil {
		_, err = ads.Recv() // its stream is identified: it was answered
	}
	if err != nil {
		m.t.Fatalf("impostor %s as %s of cluster %s: %v", identity, node, cluster, err)
	}
	im := &impostor{}
	go func() {
		defer close(done)
		sink := collectorv1.NewMetricsServiceClient(conn)
		for ctx.Err() == nil {
			switch _, err := sink.Export(ctx, &collectorv1.ExportMetricsServiceRequest{}); status.Code(err) {
			case codes.OK:
				im.admitted.Add(1)
			case codes.ResourceExhausted:
				im.refused.Add(1)
			}
		}
	}()
	return im
}

// TestReliabilityCrossClusterBudget (issue #42): allotd requires proxy
// certificates under the documented policy, spiffe://…/cluster/{cluster},
// which proves a proxy's cluster but not its node id. A real Envoy of
// cluster checkout, node b-1, sends its outcome stats every second; a
// client with a valid certificate of cluster payments subscribes under
// node id b-1 (GET /v1/rollout lists it) and exports without pause, over
// its budget. Every request through b-1 is counted: none of its flushes
// is refused. With the budget keyed by node id, b-1's flushes were all
// refused and its requests lost.
func TestReliabilityCrossClusterBudget(t *testing.T) {
	m := startMTLS(t)
	b1 := m.sidecar("b-1", "checkout", "spiffe://allot.test/cluster/checkout", sinkEverySecond())
	m.waitConnected("b-1")
	createSunk(t, m.system, 1)
	im := m.impostor("spiffe://allot.test/cluster/payments", "b-1", "payments")
	harness.MustEventually(t, 10*time.Second, func() error {
		if im.refused.Load() == 0 {
			return fmt.Errorf("the impostor's %d exports all taken: not over its budget yet", im.admitted.Load())
		}
		return nil
	})

	g := newLoadGen(t)
	g.load([]*proxy{b1}, 5)
	sent := g.sent["a"] + g.sent["b"]
	var counted int64
	err := harness.Eventually(t.Context(), 20*time.Second, func() error {
		var raw json.RawMessage
		m.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk/outcomes", nil, &raw)
		rep := &adminv1.Outcomes{}
		if err := protojson.Unmarshal(raw, rep); err != nil {
			return err
		}
		counted = 0
		for _, v := range rep.GetTotal() {
			counted += v.GetRequests()
		}
		if counted != sent {
			return fmt.Errorf("%d of the %d requests through b-1 counted", counted, sent)
		}
		return nil
	})
	if err != nil {
		t.Errorf("while a proxy of cluster payments exported under b-1's node id: %v", err)
	}
	lost := int(max(sent-counted, 0))
	report(t, "security", "cross-cluster budget: allotd requiring proxy certificates (spiffe://…/cluster/{cluster}); a client with a valid certificate of cluster payments subscribes under the node id of checkout's Envoy b-1 and exports without pause; b-1 sends its outcomes every second",
		fmt.Sprintf("%d of %d requests through b-1 counted; the impostor's %d exports taken, %d refused (its own connection's budget, %d a second)",
			counted, sent, im.admitted.Load(), im.refused.Load(), outcomes.MaxExportsPerSecond), lost)
}
