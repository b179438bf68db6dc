package xds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/allotmesh/allot/control-plane/xds"
)

// silentStreams opens n ADS streams on one new connection that never send
// a request, and returns their ends (closed with the test).
func silentStreams(t *testing.T, addr string, n int) []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var out []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	for range n {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := ads.StreamAggregatedResources(sctx)
		if err != nil {
			scancel()
			t.Fatal(err)
		}
		t.Cleanup(scancel)
		out = append(out, st)
	}
	return out
}

// TestSilentStreamsDoNotFillStreamCap: streams that never send a request
// are not counted against the stream limit (a client cannot lock real
// proxies out with them): with a limit of 2, three connections of
// xds.MaxStreamsPerConnection silent streams each leave room for two real
// proxies, and the third is refused.
func TestSilentStreamsDoNotFillStreamCap(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithMaxStreams(2))
	for range 3 {
		silentStreams(t, s.addr, xds.MaxStreamsPerConnection)
	}
	for _, n := range []string{"real-1", "real-2"} {
		c := connect(t, s.addr, xds.APIADS, n, "shop")
		c.request("", "", "")
		c.ack(c.expect("v0"))
	}
	st := refused(t, s.addr, &corev3.Node{Id: "real-3", Cluster: "shop"})
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "streams: ") {
		t.Fatalf("status %v, want ResourceExhausted naming streams", st)
	}
}

// TestStreamsPerConnectionBounded: one connection carries at most
// xds.MaxStreamsPerConnection streams at once; one more waits for one of
// them to end.
func TestStreamsPerConnectionBounded(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev3.Node{Id: "n", Cluster: "shop"}
	var first context.CancelFunc
	for i := range xds.MaxStreamsPerConnection {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		if i == 0 {
			first = scancel
		}
		st, err := ads.StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		// Each is served: it gets its configuration.
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{resourceName}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	// The server's SETTINGS frame has reached the client: the next stream
	// waits for a slot.
	octx, ocancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ocancel()
	st, err := ads.StreamAggregatedResources(octx)
	if err == nil {
		err = st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{resourceName}})
		if err == nil {
			_, err = st.Recv()
		}
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream %d on one connection: %v, want it kept waiting (DeadlineExceeded)", xds.MaxStreamsPerConnection+1, err)
	}
	first()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	st, err = ads.StreamAggregatedResources(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{resourceName}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("a stream once one ended: %v", err)
	}
}

// TestSilentStreamClosed: a stream that sends no request within the first
// request timeout is ended with DEADLINE_EXCEEDED naming it; a stream
// whose first request came in time lives on.
func TestSilentStreamClosed(t *testing.T) {
	const within = 300 * time.Millisecond
	s := startServerOn(t, &versions{v: map[string]string{}}, xds.ServerOptionsWithin(within))
	live := connect(t, s.addr, xds.APIADS, "live", "shop")
	live.request("", "", "")
	live.ack(live.expect("v0"))
	start := time.Now()
	silent := silentStreams(t, s.addr, 1)[0]
	_, err := silent.Recv()
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), "no request within") {
		t.Fatalf("silent stream ended with %v, want DeadlineExceeded naming the first request's deadline", err)
	}
	if d := time.Since(start); d < within {
		t.Errorf("silent stream ended after %v, before %v", d, within)
	}
	s.change(t, "shop", "v1")
	live.ack(live.expect("v1"))
}

// gone waits until node is no longer listed.
func gone(t *testing.T, s *testServer, node string) {
	t.Helper()
	eventually(t, func() error {
		if _, ok := find(s, node); ok {
			return fmt.Errorf("%s still listed", node)
		}
		return nil
	})
}

// TestNodeChangeWithinStreamRefused: a request whose node id or cluster
// differs from the stream's first is refused with INVALID_ARGUMENT naming
// the field, counted; the stream ends and the proxy is no longer listed,
// and no snapshot is built for the new cluster.
func TestNodeChangeWithinStreamRefused(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}})
	for _, tt := range []struct {
		name, field string
		node        *corev3.Node
	}{
		{"cluster", "node.cluster", &corev3.Node{Id: "p-cluster", Cluster: "elsewhere"}},
		{"node id", "node.id", &corev3.Node{Id: "someone-else", Cluster: "shop"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, s.addr, xds.APIADS, "p-"+tt.name, "shop")
			c.node.Id = "p-" + strings.ReplaceAll(tt.name, " ", "-")
			c.request("", "", "")
			r := c.expect("v0")
			if err := c.send(&discoveryv3.DiscoveryRequest{Node: tt.node, TypeUrl: resource.ExtensionConfigType,
				ResourceNames: []string{resourceName}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
				t.Fatal(err)
			}
			gone(t, s, c.node.Id)
			if n := s.overLimit(t, tt.field, "refused"); n != 1 {
				t.Errorf("over_limit_total{field=%s,action=refused} = %v, want 1", tt.field, n)
			}
			if _, ok := s.Version("elsewhere"); ok {
				t.Error("a snapshot was built for the changed cluster")
			}
		})
	}
}

// TestOneStreamCannotFillClusters: a stream that names a new cluster at
// every request (the reviewer's attack) takes one cluster, not the
// server's limit: the next real cluster is served.
func TestOneStreamCannotFillClusters(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithMaxClusters(20))
	c := connect(t, s.addr, xds.APIADS, "evil", "c0")
	for i := range 20 {
		_ = c.send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "evil", Cluster: fmt.Sprintf("c%d", i)},
			TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{resourceName}})
	}
	gone(t, s, "evil")
	shop := connect(t, s.addr, xds.APIADS, "legit", "shop")
	shop.request("", "", "")
	shop.ack(shop.expect("v0"))
}

// TestClusterLimitEvictsIdle: at the cluster limit, the first proxy of a
// new cluster takes the place of the longest-idle cluster (no stream, in
// its grace period), which is forgotten; it is refused only when every
// cluster has a live stream.
func TestClusterLimitEvictsIdle(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithMaxClusters(3), xds.WithClusterGrace(time.Hour))
	a := connect(t, s.addr, xds.APIADS, "a-1", "a")
	a.request("", "", "")
	a.ack(a.expect("v0"))
	for _, cl := range []string{"b", "c"} { // b idle longer than c
		c := connect(t, s.addr, xds.APIADS, cl+"-1", cl)
		c.request("", "", "")
		c.ack(c.expect("v0"))
		c.close()
		gone(t, s, cl+"-1")
		xds.ForgetIdle(s.Server) // stamps its idle time
	}
	d := connect(t, s.addr, xds.APIADS, "d-1", "d")
	d.request("", "", "")
	d.ack(d.expect("v0"))
	if _, ok := s.Version("b"); ok {
		t.Error("cluster b, idle the longest, was not forgotten for d")
	}
	if _, ok := s.Version("c"); !ok {
		t.Error("cluster c was forgotten, though b was idle longer")
	}
	e := connect(t, s.addr, xds.APIADS, "e-1", "e")
	e.request("", "", "")
	e.ack(e.expect("v0"))
	if _, ok := s.Version("c"); ok {
		t.Error("cluster c was not forgotten for e")
	}
	st := refused(t, s.addr, &corev3.Node{Id: "f-1", Cluster: "f"})
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "clusters: ") {
		t.Fatalf("status %v, want ResourceExhausted: every cluster has a live stream", st)
	}
	for _, cl := range []string{"a", "d", "e"} {
		if _, ok := s.Version(cl); !ok {
			t.Errorf("live cluster %s forgotten", cl)
		}
	}
}

// TestDeltaClusterChangeRefused: a delta stream keeps its first request's
// cluster: a later request without a node keeps it, one naming another
// cluster is refused with INVALID_ARGUMENT naming node.cluster.
func TestDeltaClusterChangeRefused(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}})
	st := deltaStream(t, s.addr)
	send := func(node *corev3.Node) {
		t.Helper()
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType,
			ResourceNamesSubscribe: []string{resourceName}}); err != nil {
			t.Fatal(err)
		}
	}
	send(&corev3.Node{Id: "delta-1", Cluster: "shop"})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	send(nil)
	send(&corev3.Node{Id: "delta-1", Cluster: "elsewhere"})
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "node.cluster: changed") {
			t.Fatalf("stream ended with %v, want InvalidArgument naming node.cluster", err)
		}
		break
	}
	if _, ok := s.Version("elsewhere"); ok {
		t.Error("a snapshot was built for the changed cluster")
	}
	if n := s.overLimit(t, "node.cluster", "refused"); n != 1 {
		t.Errorf("over_limit_total{field=node.cluster,action=refused} = %v, want 1", n)
	}
}
