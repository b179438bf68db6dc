//go:build e2e && reliability

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// hostileXDS sends node's first ECDS request to the xDS server at addr and,
// if nack is positive and a configuration comes back, rejects it with a
// message of nack bytes; it returns once the server answered or ended the
// stream. It fails no test: refusing it is what allotd should do.
func hostileXDS(addr string, node *corev3.Node, nack int) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return
	}
	req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}
	if st.Send(req) != nil {
		return
	}
	resp, err := st.Recv()
	if err != nil || nack <= 0 {
		return
	}
	req.ResponseNonce, req.ErrorDetail = resp.GetNonce(), &rpcstatus.Status{Code: 3, Message: strings.Repeat("x", nack)}
	if st.Send(req) == nil {
		st.CloseSend()
		st.Recv() // the server ends the stream (refused) or holds it until ctx ends
	}
}

// TestReliabilityHostileProxies: xDS clients sending what once stopped a
// replica's publishes for good (a 1.6 MB NACK, a 1.6 MB cluster name) and
// every other input over its limit do not keep a replica on etcd from
// publishing: an Envoy started after them is listed by the mesh rollout and
// applies a waited write.
func TestReliabilityHostileProxies(t *testing.T) {
	h := startReplicated(t, 1)
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", h.replicas[0].xdsPort)
	artifact := func(v string) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{"allot.artifact": structpb.NewStringValue(v)}}
	}
	hostile := []struct {
		name string
		node *corev3.Node
		nack int
	}{
		{"NACK of 1.6 MB", &corev3.Node{Id: "hostile-nack-big", Cluster: "checkout-svc"}, 1_600_000},
		{"NACK of 900 KB", &corev3.Node{Id: "hostile-nack", Cluster: "checkout-svc"}, 900_000},
		{"cluster of 1.6 MB", &corev3.Node{Id: "hostile-cluster-big", Cluster: strings.Repeat("c", 1_600_000)}, 0},
		{"cluster of 129 B", &corev3.Node{Id: "hostile-cluster", Cluster: strings.Repeat("c", 129)}, 0},
		{"node id of 257 B", &corev3.Node{Id: strings.Repeat("n", 257), Cluster: "checkout-svc"}, 0},
		{"artifact of 65 B", &corev3.Node{Id: "hostile-artifact", Cluster: "checkout-svc", Metadata: artifact(strings.Repeat("a", 65))}, 0},
	}
	var names []string
	for _, x := range hostile {
		hostileXDS(xdsAddr, x.node, x.nack)
		names = append(names, x.name)
	}

	h.sidecars("late") // waits until the mesh rollout lists the Envoy on its replica
	var ww waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(0.5), &ww)
	wedged := 0
	if !ww.Rollout.appliedBy(len(h.proxies)) {
		wedged = 1
		t.Errorf("waited write after the hostile clients: %+v", ww.Rollout)
	}
	report(t, "bad_input", "hostile xDS clients before an Envoy connects to a replica on etcd: "+strings.Join(names, ", "),
		fmt.Sprintf("%d wedged publishes; the Envoy connecting after them listed and applied a waited write", wedged), 0)
}
