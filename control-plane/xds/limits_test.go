package xds_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/allotmesh/allot/control-plane/rollout"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/xds"
)

// refused sends node's first request on a new ADS stream and returns the
// status the stream ends with (failing if a response comes instead).
func refused(t *testing.T, addr string, node *corev3.Node) *status.Status {
	t.Helper()
	return refusedStream(t, addr, node, false)
}

// refusedStream is refused on a state-of-the-world or (delta) a delta ADS
// stream.
func refusedStream(t *testing.T, addr string, node *corev3.Node, delta bool) *status.Status {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var recv func() (string, error)
	// A send to a stream refused already fails with io.EOF: Recv says why.
	if delta {
		st, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType})
		recv = func() (string, error) { r, err := st.Recv(); return r.GetSystemVersionInfo(), err }
	} else {
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{resourceName}})
		recv = func() (string, error) { r, err := st.Recv(); return r.GetVersionInfo(), err }
	}
	v, err := recv()
	if err == nil {
		t.Fatalf("node %.40s…: response %q, want the stream refused", node.GetId(), v)
	}
	return status.Convert(err)
}

// ended returns the status the stream ended with, failing if it sends a
// response instead or is still open after 5 s.
func (c *client) ended() *status.Status {
	c.t.Helper()
	select {
	case r, ok := <-c.resps:
		if ok {
			c.t.Fatalf("%s: response %q, want the stream ended", c.node.Id, r.GetVersionInfo())
		}
		return status.Convert(c.err)
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: stream still open after 5s", c.node.Id)
	}
	return nil
}

// TestResourceTypesBounded: a request for a type its stream cannot serve
// ends the stream with INVALID_ARGUMENT naming type_url, and is counted:
// on an ADS stream (either kind) a type URL that is no xDS type, on an
// ECDS stream any but ECDS's. A proxy that pipelines requests for 200
// types, each of which the cache would answer at once, has its stream
// ended at the first; one that asks for every xDS type again and again
// is served; the other proxies still get the next write.
func TestResourceTypesBounded(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	other := connect(t, s.addr, xds.APIADS, "shop-0", "shop")
	other.request("", "", "")
	other.ack(other.expect("v1"))

	const notAType = "type.googleapis.com/allot.NotAType"
	for i, tc := range []struct{ api, typeURL, want string }{
		{xds.APIADS, notAType, `xds: type_url: "` + notAType + `" is not an xDS resource type`},
		{xds.APIECDS, resource.ListenerType, `xds: type_url: "` + resource.ListenerType + `" on an ECDS stream, which serves ` +
			resource.ExtensionConfigType + " only"},
	} {
		c := connect(t, s.addr, tc.api, fmt.Sprintf("shop-%d", i+1), "shop")
		if err := c.send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: tc.typeURL, VersionInfo: "x"}); err != nil {
			t.Fatal(err)
		}
		if st := c.ended(); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
			t.Errorf("%s stream asking for %s: %v, want INVALID_ARGUMENT %q", tc.api, tc.typeURL, st, tc.want)
		}
	}
	delta := deltaStream(t, s.addr)
	_ = delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "shop-delta", Cluster: "shop"}, TypeUrl: notAType})
	if _, err := delta.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "xds: type_url:") {
		t.Errorf("delta stream asking for %s: %v, want INVALID_ARGUMENT naming type_url", notAType, err)
	}
	if n := s.overLimit(t, "type_url", "refused"); n != 3 {
		t.Errorf("over_limit_total{field=type_url,action=refused} = %v, want 3", n)
	}

	flood := connect(t, s.addr, xds.APIADS, "shop-flood", "shop")
	flood.request("", "", "")
	flood.ack(flood.expect("v1"))
	for i := range 200 {
		// Once the stream is refused, a send fails (io.EOF).
		if flood.send(&discoveryv3.DiscoveryRequest{TypeUrl: fmt.Sprintf("%s%d", notAType, i), VersionInfo: "x"}) != nil {
			break
		}
	}
	if st := flood.ended(); st.Code() != codes.InvalidArgument {
		t.Errorf("a stream asking for 200 types: %v, want INVALID_ARGUMENT", st)
	}
	if n := s.overLimit(t, "type_url", "refused"); n != 4 {
		t.Errorf("over_limit_total{field=type_url,action=refused} = %v after the 200 requests, want 4: refused at the first", n)
	}

	// Every xDS type, five times over, pipelined: served, at most one
	// response buffered per type.
	known := connect(t, s.addr, xds.APIADS, "shop-known", "shop")
	known.request("", "", "")
	known.ack(known.expect("v1"))
	for range 5 {
		for _, typeURL := range []string{resource.EndpointType, resource.ClusterType, resource.RouteType, resource.ScopedRouteType,
			resource.VirtualHostType, resource.ListenerType, resource.SecretType, resource.RuntimeType,
			resource.ExtensionConfigType, resource.RateLimitConfigType} {
			if err := known.send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.change(t, "shop", "v2")
	other.ack(other.expect("v2"))
	wantState(t, s, "shop-0", rollout.StateApplied, "v2")
	if _, ok := find(s, "shop-known"); !ok {
		t.Error("the stream asking for every xDS type was dropped")
	}
	if n := s.overLimit(t, "type_url", "refused"); n != 4 {
		t.Errorf("over_limit_total{field=type_url,action=refused} = %v after every xDS type, want 4", n)
	}
}

// deltaStream opens a delta ADS stream to addr, for at most 5 s.
func deltaStream(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// overLimit is allot_xds_over_limit_total{field, action}.
func (s *testServer) overLimit(t *testing.T, field, action string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "allot_xds_over_limit_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["field"] == field && l["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestNodeOverLimitRefused: a node whose id, cluster or artifact is over
// its bound is refused with INVALID_ARGUMENT naming the field and the
// limit, counted, never tracked; the server goes on serving.
func TestNodeOverLimitRefused(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	artifact := func(v string) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{xds.ArtifactKey: structpb.NewStringValue(v)}}
	}
	for _, tt := range []struct {
		name, field, want string
		node              *corev3.Node
	}{
		{"node", "node", fmt.Sprintf("bytes, limit %d", xds.MaxNodeBytes), &corev3.Node{Id: "big-node", Cluster: "shop", UserAgentName: strings.Repeat("u", xds.MaxNodeBytes)}},
		{"node id", "node.id", "257 bytes, limit 256", &corev3.Node{Id: strings.Repeat("n", 257), Cluster: "shop"}},
		{"cluster", "node.cluster", "1600000 bytes, limit 128", &corev3.Node{Id: "big-cluster", Cluster: strings.Repeat("c", 1_600_000)}},
		{"cluster just over", "node.cluster", "129 bytes, limit 128", &corev3.Node{Id: "long-cluster", Cluster: strings.Repeat("c", 129)}},
		{"cluster escaped", "node.cluster", "character JSON escapes", &corev3.Node{Id: "html-cluster", Cluster: "shop<script>"}},
		{"artifact", "node.metadata.allot.artifact", "65 bytes, limit 64", &corev3.Node{Id: "long-artifact", Cluster: "shop", Metadata: artifact(strings.Repeat("a", 65))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := s.overLimit(t, tt.field, "refused")
			st := refused(t, s.addr, tt.node)
			if len(tt.node.GetCluster()) > xds.MaxRequestBytes {
				// The message limit refuses it before any callback.
				if st.Code() != codes.ResourceExhausted {
					t.Fatalf("status %v, want ResourceExhausted (message over %d bytes)", st, xds.MaxRequestBytes)
				}
				return
			}
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field+": ") || !strings.Contains(st.Message(), tt.want) {
				t.Fatalf("status %v, want InvalidArgument naming %s and %q", st, tt.field, tt.want)
			}
			if got := s.overLimit(t, tt.field, "refused"); got != before+1 {
				t.Errorf("over_limit_total{field=%s,action=refused} = %v, want %v", tt.field, got, before+1)
			}
			if _, ok := find(s, tt.node.GetId()); ok {
				t.Errorf("refused node %s is tracked", tt.node.GetId())
			}
		})
	}
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	c.ack(c.expect("v1"))
	wantState(t, s, "shop-1", rollout.StateApplied, "v1")
	if ts := s.Targets(); len(ts) != 1 {
		t.Errorf("targets %v, want shop's only", ts)
	}
}

// TestNACKMessageBounded: a NACK's message under the message limit is kept
// cut to MaxRejectionBytes with a marker and counted; a NACK over the
// message limit ends its stream (RESOURCE_EXHAUSTED) and the server goes
// on serving.
func TestNACKMessageBounded(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	r := c.expect("v1")
	msg := "allot: configuration rejected: " + strings.Repeat("é", 450_000) // 900 KB, under the message limit
	c.nack(r, "", msg)
	eventually(t, func() error {
		p := proxy(t, s, "shop-1")
		if p.State != rollout.StateRejected || p.Rejected == nil {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	got := proxy(t, s, "shop-1").Rejected.Error
	marker := fmt.Sprintf("… [truncated %d bytes]", len(msg)-(xds.MaxRejectionBytes-1)) // cut at a rune boundary
	if !strings.HasPrefix(got, "allot: configuration rejected: é") || !strings.HasSuffix(got, marker) ||
		len(got) > xds.MaxRejectionBytes+len(marker) || !utf8.ValidString(got) {
		t.Errorf("rejection kept as %d bytes ending %q, want at most %d bytes of the message + %q", len(got), got[max(len(got)-60, 0):],
			xds.MaxRejectionBytes, marker)
	}
	if n := s.overLimit(t, "error_detail.message", "truncated"); n != 1 {
		t.Errorf("over_limit_total{field=error_detail.message,action=truncated} = %v, want 1", n)
	}

	// 1.6 MB: over the message limit.
	big := connect(t, s.addr, xds.APIADS, "shop-2", "shop")
	big.request("", "", "")
	br := big.expect("v1")
	big.request("", br.GetNonce(), strings.Repeat("x", 1_600_000))
	eventually(t, func() error {
		if _, ok := find(s, "shop-2"); ok {
			return fmt.Errorf("shop-2 still connected after a 1.6 MB request")
		}
		return nil
	})
	if n := s.overLimit(t, "error_detail.message", "truncated"); n != 1 {
		t.Errorf("the refused NACK was counted as truncated too: %v", n)
	}
	s.change(t, "shop", "v2")
	c.ack(c.expect("v2"))
	wantState(t, s, "shop-1", rollout.StateApplied, "v2")
}

// TestClusterLimit: the first proxy of a cluster beyond the server's
// limit is refused with RESOURCE_EXHAUSTED, counted, never listed, and no
// snapshot is built for it; proxies of known clusters still connect; once
// a cluster is forgotten (no stream for the grace period), a new one fits.
func TestClusterLimit(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithMaxClusters(2), xds.WithClusterGrace(100*time.Millisecond))
	var b *client
	for _, cl := range []string{"a", "b"} {
		c := connect(t, s.addr, xds.APIADS, cl+"-1", cl)
		c.request("", "", "")
		c.ack(c.expect("v0"))
		b = c
	}
	st := refused(t, s.addr, &corev3.Node{Id: "c-1", Cluster: "c"})
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "clusters: ") || !strings.Contains(st.Message(), "tracks 2 clusters") {
		t.Fatalf("status %v, want ResourceExhausted naming clusters and the limit", st)
	}
	if n := s.overLimit(t, "clusters", "refused"); n != 1 {
		t.Errorf("over_limit_total{field=clusters,action=refused} = %v, want 1", n)
	}
	if _, ok := s.Version("c"); ok {
		t.Error("a snapshot was built for the refused cluster")
	}
	if _, ok := find(s, "c-1"); ok {
		t.Error("the refused proxy is listed")
	}
	a2 := connect(t, s.addr, xds.APIECDS, "a-2", "a")
	a2.request("", "", "")
	a2.ack(a2.expect("v0"))

	b.close()
	eventually(t, func() error {
		if _, ok := s.Version("b"); ok {
			return errors.New("cluster b not forgotten yet")
		}
		return nil
	})
	c := connect(t, s.addr, xds.APIADS, "c-1", "c")
	c.request("", "", "")
	c.ack(c.expect("v0"))
}

// TestImplausibleVersionIgnored: a version_info allotd cannot have made
// (too long, or other characters) is not recorded as what the proxy runs.
func TestImplausibleVersionIgnored(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request(strings.Repeat("v", xds.MaxVersionBytes+1), "", "")
	r := c.expect("v1")
	if p := proxy(t, s, "shop-1"); p.Acked != "" {
		t.Errorf("acked %q, want none", p.Acked)
	}
	if n := s.overLimit(t, "version_info", "ignored"); n != 1 {
		t.Errorf("over_limit_total{field=version_info,action=ignored} = %v, want 1", n)
	}
	c.ack(r)
	wantState(t, s, "shop-1", rollout.StateApplied, "v1")
}

// TestStreamLimit: a stream opened while the server serves its limit of
// streams (state of the world or delta) is refused with
// RESOURCE_EXHAUSTED naming streams, counted, never tracked; once a stream
// closes, a new one is served.
func TestStreamLimit(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithMaxStreams(2))
	var b *client
	for _, api := range []string{xds.APIADS, xds.APIECDS} {
		c := connect(t, s.addr, api, api+"-1", "a")
		c.request("", "", "")
		c.ack(c.expect("v0"))
		b = c
	}
	for i, delta := range []bool{false, true} {
		st := refusedStream(t, s.addr, &corev3.Node{Id: "one-too-many", Cluster: "a"}, delta)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "streams: ") || !strings.Contains(st.Message(), "serves 2 streams") {
			t.Fatalf("delta %v: status %v, want ResourceExhausted naming streams and the limit", delta, st)
		}
		if n := s.overLimit(t, "streams", "refused"); n != float64(i+1) {
			t.Errorf("over_limit_total{field=streams,action=refused} = %v, want %d", n, i+1)
		}
	}
	if _, ok := find(s, "one-too-many"); ok {
		t.Error("the refused proxy is listed")
	}
	b.close()
	eventually(t, func() error {
		if _, ok := find(s, b.node.GetId()); ok {
			return errors.New("the closed stream is still tracked")
		}
		return nil
	})
	c := connect(t, s.addr, xds.APIADS, "a-3", "a")
	c.request("", "", "")
	c.ack(c.expect("v0"))
	wantState(t, s, "a-3", rollout.StateApplied, "v0")
}
