package xds

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// ecdsSnapshot is a snapshot of version holding one ECDS resource per name,
// each configured with its own name and version.
func ecdsSnapshot(t *testing.T, version string, names ...string) *cachev3.Snapshot {
	t.Helper()
	var rs []types.Resource
	for _, name := range names {
		cfg, err := anypb.New(structpb.NewStringValue(name + "@" + version))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, &corev3.TypedExtensionConfig{Name: name, TypedConfig: cfg})
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ExtensionConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// watchECDS opens a watch as the state-of-the-world server does for a
// request of node n naming names, and returns the channel it is answered
// on.
func watchECDS(t *testing.T, c *holdCache, sub *streamv3.Subscription, version, nonce string, names ...string) chan cachev3.Response {
	t.Helper()
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resource.ExtensionConfigType,
		VersionInfo: version, ResponseNonce: nonce, ResourceNames: names}
	sub.SetResourceSubscription(names)
	out := make(chan cachev3.Response, 1)
	if _, err := c.CreateWatch(req, *sub, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// answered returns the response on out, which must be there.
func answered(t *testing.T, sub *streamv3.Subscription, out chan cachev3.Response) *discoveryv3.DiscoveryResponse {
	t.Helper()
	select {
	case r := <-out:
		sub.SetReturnedResources(r.GetReturnedResources())
		d, err := r.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		return d
	default:
		t.Fatal("no response")
		return nil
	}
}

// TestECDSEncodedOncePerSnapshot: every proxy's response to a snapshot
// carries the resources encoded once when the snapshot was set (the same
// messages, byte for byte the snapshot cache's encoding), in a response
// and a returned-resources map of its own; a request naming some of the
// resources gets those alone; an ACK waits for the next version, which is
// encoded once again.
func TestECDSEncodedOncePerSnapshot(t *testing.T) {
	c := newHoldCache(cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), cachev3.IDHash{})
	v1 := ecdsSnapshot(t, "v1", "a", "b")
	if err := c.SetSnapshot(context.Background(), "n", v1); err != nil {
		t.Fatal(err)
	}
	subs := make([]streamv3.Subscription, 3)
	var got []*discoveryv3.DiscoveryResponse
	for i := range subs {
		subs[i] = streamv3.NewSotwSubscription(nil, true)
		out := watchECDS(t, c, &subs[i], "", "", "a", "b")
		got = append(got, answered(t, &subs[i], out))
	}
	want := map[string][]byte{}
	for name, r := range v1.GetResources(resource.ExtensionConfigType) {
		b, err := cachev3.MarshalResource(r)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = b
	}
	if got[0] == got[1] {
		t.Fatal("two streams share one response message; the server sets each one's nonce")
	}
	for i, d := range got {
		if d.GetVersionInfo() != "v1" || len(d.GetResources()) != 2 {
			t.Fatalf("response %d: version %q, %d resources; want v1, 2", i, d.GetVersionInfo(), len(d.GetResources()))
		}
		for j, r := range d.GetResources() {
			if r != got[0].GetResources()[j] {
				t.Errorf("response %d: resource %d is another message than response 0's: encoded again", i, j)
			}
			var ext corev3.TypedExtensionConfig
			if err := proto.Unmarshal(r.GetValue(), &ext); err != nil {
				t.Fatal(err)
			}
			if string(r.GetValue()) != string(want[ext.GetName()]) || r.GetTypeUrl() != resource.ExtensionConfigType {
				t.Errorf("response %d: resource %q is not the snapshot cache's encoding", i, ext.GetName())
			}
		}
	}
	subs[0].ReturnedResources()["a"] = "changed"
	if v := subs[1].ReturnedResources()["a"]; v != "v1" {
		t.Errorf("a stream's returned resources changed with another's: a is %q", v)
	}

	// A request naming one resource gets it alone.
	only := streamv3.NewSotwSubscription(nil, true)
	out := watchECDS(t, c, &only, "", "", "b")
	if d := answered(t, &only, out); len(d.GetResources()) != 1 || len(only.ReturnedResources()) != 1 || only.ReturnedResources()["b"] != "v1" {
		t.Fatalf("request naming b: %d resources, returned %v; want b alone", len(d.GetResources()), only.ReturnedResources())
	}

	// ACKs wait; the next version is encoded once for all of them.
	var outs []chan cachev3.Response
	for i := 1; i < 3; i++ {
		out := watchECDS(t, c, &subs[i], "v1", "1", "a", "b")
		if len(out) != 0 {
			t.Fatalf("ACK %d answered at once", i)
		}
		outs = append(outs, out)
	}
	if err := c.SetSnapshot(context.Background(), "n", ecdsSnapshot(t, "v2", "a", "b")); err != nil {
		t.Fatal(err)
	}
	d1, d2 := answered(t, &subs[1], outs[0]), answered(t, &subs[2], outs[1])
	if d1.GetVersionInfo() != "v2" || d2.GetVersionInfo() != "v2" || d1.GetResources()[0] != d2.GetResources()[0] {
		t.Errorf("after v2: versions %q, %q; want v2 in both, on the same encoded resources", d1.GetVersionInfo(), d2.GetVersionInfo())
	}
	if d1.GetResources()[0] == got[0].GetResources()[0] {
		t.Error("v2 answered with v1's encoded resources")
	}
}

// TestECDSHeldNACKReleasedToOwnVersion: a proxy that rejected v2 is not
// sent v2 again; when the cluster goes back to the version it runs, it is
// sent nothing, and the version after that reaches it.
func TestECDSHeldNACKReleasedToOwnVersion(t *testing.T) {
	c := newHoldCache(cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), cachev3.IDHash{})
	sub := streamv3.NewSotwSubscription(nil, true)
	set := func(v string) {
		t.Helper()
		if err := c.SetSnapshot(context.Background(), "n", ecdsSnapshot(t, v, "a")); err != nil {
			t.Fatal(err)
		}
	}
	set("v1")
	out := watchECDS(t, c, &sub, "", "", "a")
	answered(t, &sub, out)
	out = watchECDS(t, c, &sub, "v1", "1", "a")
	set("v2")
	answered(t, &sub, out)
	// Envoy rejects v2: it sends the version it runs, with the error.
	out = make(chan cachev3.Response, 1)
	nack := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resource.ExtensionConfigType,
		VersionInfo: "v1", ResponseNonce: "2", ResourceNames: []string{"a"}, ErrorDetail: &status.Status{Message: "bad"}}
	if _, err := c.CreateWatch(nack, sub, out); err != nil {
		t.Fatal(err)
	}
	if w := c.heldCount(); w != 1 || len(out) != 0 {
		t.Fatalf("NACK of v2: %d held watches, %d responses; want it held", w, len(out))
	}
	set("v1")
	if len(out) != 0 {
		t.Fatal("back to v1, which the proxy runs: it was sent v1 again")
	}
	set("v3")
	if d := answered(t, &sub, out); d.GetVersionInfo() != "v3" {
		t.Fatalf("after v3: sent %q", d.GetVersionInfo())
	}
}
