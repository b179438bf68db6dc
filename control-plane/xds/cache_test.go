package xds

import (
	"context"
	"slices"
	"strings"
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

// ecdsStream is one proxy's ECDS stream against a cache, driven as the
// state-of-the-world server drives it: each request cancels the stream's
// open watch, and a response sets the stream's returned resources.
type ecdsStream struct {
	c       cachev3.SnapshotCache
	sub     streamv3.Subscription
	out     chan cachev3.Response
	cancel  func()
	version string // last version the proxy was sent
	nonce   string
}

// step applies one step of a script ("set V names…", "clear", "req
// names…") and reports what the stream received since: "V: names…" or
// "-".
func (s *ecdsStream) step(t *testing.T, step string) string {
	t.Helper()
	f := strings.Fields(step)
	switch f[0] {
	case "set":
		if err := s.c.SetSnapshot(context.Background(), "n", ecdsSnapshot(t, f[1], f[2:]...)); err != nil {
			t.Fatal(err)
		}
	case "clear":
		s.c.ClearSnapshot("n")
	case "req":
		if s.cancel != nil {
			s.cancel()
		}
		names := f[1:]
		req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resource.ExtensionConfigType,
			VersionInfo: s.version, ResponseNonce: s.nonce, ResourceNames: names}
		s.sub.SetResourceSubscription(names)
		s.out = make(chan cachev3.Response, 1)
		var err error
		if s.cancel, err = s.c.CreateWatch(req, s.sub, s.out); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-s.out:
		s.sub.SetReturnedResources(r.GetReturnedResources())
		d, err := r.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		s.version, s.nonce = d.GetVersionInfo(), s.nonce+"x"
		var got []string
		for _, a := range d.GetResources() {
			var tec corev3.TypedExtensionConfig
			if err := a.UnmarshalTo(&tec); err != nil {
				t.Fatal(err)
			}
			got = append(got, tec.GetName())
		}
		slices.Sort(got)
		return d.GetVersionInfo() + ": " + strings.Join(got, " ")
	default:
		return "-"
	}
}

// TestECDSAnswersAsTheSnapshotCache: on requests that are neither a NACK
// nor a reconnect, holdCache answers exactly when, and with what, the
// snapshot cache answers (a script run against both, step by step).
func TestECDSAnswersAsTheSnapshotCache(t *testing.T) {
	scripts := map[string][]string{
		"wildcard before a snapshot": {"req", "set v1 a b", "req", "set v2 a b", "req", "set v2 a b", "set v3 a"},
		"named subset":               {"set v1 a b", "req a", "req a", "set v2 a b", "req a b", "req a b", "set v3 b"},
		"a name the snapshot lacks":  {"set v1 a", "req a z", "req a z", "set v2 a z", "req a z"},
		"explicit wildcard":          {"set v1 a b", "req *", "req *", "set v2 a b c", "req *"},
		"wildcard, then named":       {"set v1 a b", "req", "req a", "set v2 a b", "req a"},
		"cleared without a watch":    {"set v1 a", "req a", "clear", "req a", "set v2 a", "req a"},
		"newly named resource":       {"set v1 a b", "req a", "req a", "req a b", "req a b"},
	}
	for name, script := range scripts {
		bare := &ecdsStream{c: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), sub: streamv3.NewSotwSubscription(nil, true)}
		hold := &ecdsStream{c: newHoldCache(cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), cachev3.IDHash{}),
			sub: streamv3.NewSotwSubscription(nil, true)}
		answers := 0
		for i, step := range script {
			want, got := bare.step(t, step), hold.step(t, step)
			if got != want {
				t.Errorf("%s: step %d (%s): holdCache sent %q, the snapshot cache %q", name, i, step, got, want)
			}
			if want != "-" {
				answers++
			}
		}
		if answers == 0 {
			t.Errorf("%s: the snapshot cache answered nothing: the script tests nothing", name)
		}
	}
}
