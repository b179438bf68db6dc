//go:build e2e && reliability

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestReliabilitySilentAndHoppingStreams: xDS clients that open streams
// and never send a request (4 connections of 16, far past an allotd
// serving -xds-max-streams 2), and one stream naming a new cluster at
// each of 50 requests, lock no Envoy out: two Envoys started after them
// connect, are listed, and apply a waited write.
func TestReliabilitySilentAndHoppingStreams(t *testing.T) {
	s := startSystem(t, "-xds-max-streams", "2")
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", s.xdsPort)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	silent := 0
	for range 4 {
		conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
		for range 16 {
			if _, err := ads.StreamAggregatedResources(ctx); err != nil {
				t.Fatal(err)
			}
			silent++
		}
	}
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hop, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hopper", Cluster: fmt.Sprintf("hop-%d", i)},
			TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}
		if hop.Send(req) != nil {
			break // refused: the stream ended
		}
	}
	for hop.Context().Err() == nil {
		if _, err := hop.Recv(); err != nil {
			break
		}
	}

	a, b := s.startSidecar("checkout-1", "checkout-svc"), s.startSidecar("checkout-2", "checkout-svc")
	s.waitConnected(a.Node, b.Node)
	var ww waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(0.5), &ww)
	lockedOut := 0
	if !ww.Rollout.appliedBy(2) {
		lockedOut = 2 - ww.Rollout.Counts["applied"]
		t.Errorf("waited write after the silent and hopping streams: %+v", ww.Rollout)
	}
	report(t, "bad_input", fmt.Sprintf("%d xDS streams that never send a request (16 per connection) and one stream naming a new cluster "+
		"at each of 50 requests, before 2 Envoys connect to an allotd serving -xds-max-streams 2", silent),
		fmt.Sprintf("%d Envoys locked out; both listed and applied a waited write", lockedOut), 0)
}
