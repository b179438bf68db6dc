package xds_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/allotmesh/allot/control-plane/rollout"
	"net"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dynmodv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_modules/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmextv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/xds"
)

const (
	wasmType   = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	nativeType = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"
)

// artifactVersions is an ArtifactBuilder over versions: each artifact's
// resource is its real filter message carrying a Struct with the version.
type artifactVersions struct {
	*versions
	omit string // an artifact to leave out of the map
}

func (b *artifactVersions) build(cluster string, _ int64) (string, map[string]*corev3.TypedExtensionConfig, error) {
	v, ext, err := b.versions.build(cluster)
	if err != nil {
		return "", nil, err
	}
	conf := ext.GetTypedConfig() // Any(Struct{version})
	wasm, err := anypb.New(&wasmv3.Wasm{Config: &wasmextv3.PluginConfig{Name: resourceName, Configuration: conf}})
	if err != nil {
		return "", nil, err
	}
	native, err := anypb.New(&dynmodv3.DynamicModuleFilter{FilterName: resourceName, FilterConfig: conf})
	if err != nil {
		return "", nil, err
	}
	out := map[string]*corev3.TypedExtensionConfig{
		xds.ArtifactWasm:   {Name: resourceName, TypedConfig: wasm},
		xds.ArtifactNative: {Name: resourceName, TypedConfig: native},
	}
	delete(out, b.omit)
	return v, out, nil
}

func startArtifactServer(t *testing.T, b *artifactVersions, opts ...xds.Option) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := xds.NewArtifacts(ctx, b.build, opts...)
	g := grpc.NewServer()
	x.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(func() { cancel(); g.Stop() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(x.Collectors()...)
	return &testServer{Server: x, b: b.versions, addr: ln.Addr().String(), reg: reg}
}

// connectArtifact connects a client whose node metadata carries
// allot.artifact = artifact (nil: no metadata at all).
func connectArtifact(t *testing.T, addr, api, node, cluster string, artifact any) *client {
	t.Helper()
	c := connect(t, addr, api, node, cluster)
	if artifact != nil {
		md, err := structpb.NewStruct(map[string]any{xds.ArtifactKey: artifact, "other": "kept"})
		if err != nil {
			t.Fatal(err)
		}
		c.node.Metadata = md
	}
	return c
}

// expectType returns the next response and checks its version and that its
// one resource is the "allot" TypedExtensionConfig of filter type typeURL
// carrying that version.
func (c *client) expectType(version, typeURL string) *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	r := c.next()
	if r.GetVersionInfo() != version || len(r.GetResources()) != 1 {
		c.t.Fatalf("%s: response version %q with %d resources, want %q with 1", c.node.Id, r.GetVersionInfo(), len(r.GetResources()), version)
	}
	ext := &corev3.TypedExtensionConfig{}
	if err := r.GetResources()[0].UnmarshalTo(ext); err != nil {
		c.t.Fatal(err)
	}
	if got := ext.GetTypedConfig().GetTypeUrl(); ext.GetName() != resourceName || got != typeURL {
		c.t.Fatalf("%s: resource %q of type %s, want %q of type %s", c.node.Id, ext.GetName(), got, resourceName, typeURL)
	}
	var conf *anypb.Any
	switch typeURL {
	case wasmType:
		w := &wasmv3.Wasm{}
		if err := ext.GetTypedConfig().UnmarshalTo(w); err != nil {
			c.t.Fatal(err)
		}
		conf = w.GetConfig().GetConfiguration()
	case nativeType:
		n := &dynmodv3.DynamicModuleFilter{}
		if err := ext.GetTypedConfig().UnmarshalTo(n); err != nil {
			c.t.Fatal(err)
		}
		conf = n.GetFilterConfig()
	}
	st := &structpb.Struct{}
	if err := conf.UnmarshalTo(st); err != nil {
		c.t.Fatal(err)
	}
	if got := st.GetFields()["version"].GetStringValue(); got != version {
		c.t.Fatalf("%s: filter configuration carries version %q, want %q", c.node.Id, got, version)
	}
	return r
}

// TestArtifacts: proxies of one cluster running different artifacts each
// get their artifact's resource with the cluster's one version, and the
// native proxy's ACKs and NACKs are tracked as the Wasm proxy's are. A proxy
// naming an unknown artifact gets nothing and is reported unserved.
func TestArtifacts(t *testing.T) {
	s := startArtifactServer(t, &artifactVersions{versions: &versions{v: map[string]string{"shop": "v1"}}})
	wasm := connectArtifact(t, s.addr, xds.APIADS, "shop-wasm", "shop", nil)
	wasm2 := connectArtifact(t, s.addr, xds.APIADS, "shop-wasm-explicit", "shop", "wasm")
	native := connectArtifact(t, s.addr, xds.APIADS, "shop-native", "shop", "native")
	nativeECDS := connectArtifact(t, s.addr, xds.APIECDS, "shop-native-ecds", "shop", "native")
	odd := connectArtifact(t, s.addr, xds.APIADS, "shop-odd", "shop", "Native")
	num := connectArtifact(t, s.addr, xds.APIECDS, "shop-num", "shop", 2.0)
	for _, c := range []*client{wasm, wasm2, native, nativeECDS, odd, num} {
		c.request("", "", "")
	}
	wasm.ack(wasm.expectType("v1", wasmType))
	wasm2.ack(wasm2.expectType("v1", wasmType))
	native.ack(native.expectType("v1", nativeType))
	nativeECDS.ack(nativeECDS.expectType("v1", nativeType))
	for _, n := range []string{"shop-wasm", "shop-wasm-explicit", "shop-native", "shop-native-ecds"} {
		wantState(t, s, n, rollout.StateApplied, "v1")
	}
	odd.silent()
	num.silent()

	for _, tc := range []struct{ node, artifact, errPart string }{
		{"shop-wasm", "wasm", ""},
		{"shop-wasm-explicit", "wasm", ""},
		{"shop-native", "native", ""},
		{"shop-odd", "Native", `allot.artifact is "Native", an artifact allotd does not serve (it serves native, wasm); no filter configuration is sent`},
		{"shop-num", "2", `allot.artifact is 2, want a string`},
	} {
		p := proxy(t, s, tc.node)
		if p.Artifact != tc.artifact || !strings.Contains(p.Error, tc.errPart) || (tc.errPart == "") != (p.Error == "") {
			t.Errorf("%s: artifact %q error %q, want %q and an error containing %q", tc.node, p.Artifact, p.Error, tc.artifact, tc.errPart)
		}
		if want := map[bool]rollout.State{true: rollout.StateApplied, false: rollout.StateUnserved}[tc.errPart == ""]; p.State != want {
			t.Errorf("%s: state %s, want %s", tc.node, p.State, want)
		}
		if tc.errPart != "" && (p.Sent != "" || p.Pushes != 0 || p.Target != "v1") {
			t.Errorf("%s: unserved proxy was sent %q (%d pushes), target %q", tc.node, p.Sent, p.Pushes, p.Target)
		}
	}
	if got := s.metric(t, "allot_xds_proxies", "unserved"); got != 2 {
		t.Errorf("proxies{state=unserved} = %v, want 2", got)
	}

	// The native proxy rejects v2: recorded, not re-sent; the Wasm proxies
	// apply it. A wait reports both the rejection and the unserved proxies.
	before := s.Targets()
	s.change(t, "shop", "v2")
	done := make(chan error, 1)
	var ro rollout.Rollout
	go func() {
		var err error
		ro, err = s.WaitFor(context.Background(), s.Targets().Changed(before))
		done <- err
	}()
	wasm.ack(wasm.expectType("v2", wasmType))
	wasm2.ack(wasm2.expectType("v2", wasmType))
	nativeECDS.ack(nativeECDS.expectType("v2", nativeType))
	native.nack(native.expectType("v2", nativeType), "v1", "Failed to load dynamic module: undefined symbol: envoy_dynamic_module_on_http_filter_new")
	err := <-done
	if !errors.Is(err, rollout.ErrRejected) || !errors.Is(err, rollout.ErrUnserved) ||
		!strings.Contains(err.Error(), "undefined symbol") || !strings.Contains(err.Error(), `"Native"`) {
		t.Fatalf("WaitFor = %v, want the native rejection and both unserved proxies", err)
	}
	states := map[string]rollout.State{}
	for _, p := range ro.Proxies {
		states[p.NodeID] = p.State
	}
	want := map[string]rollout.State{"shop-wasm": rollout.StateApplied, "shop-wasm-explicit": rollout.StateApplied, "shop-native": rollout.StateRejected,
		"shop-native-ecds": rollout.StateApplied, "shop-odd": rollout.StateUnserved, "shop-num": rollout.StateUnserved}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("rollout states %v, want %v", states, want)
	}
	if p := proxy(t, s, "shop-native"); p.Rejected == nil || p.Rejected.Version != "v2" || p.Acked != "v1" {
		t.Errorf("shop-native after NACK: %+v", p)
	}
	native.silent()
	odd.silent()
	if got := s.metric(t, "allot_xds_rejections_total", ""); got != 1 {
		t.Errorf("rejections_total = %v, want 1", got)
	}

	// The next change is the next response the native proxy gets.
	s.change(t, "shop", "v3")
	native.ack(native.expectType("v3", nativeType))
	wantState(t, s, "shop-native", rollout.StateApplied, "v3")
	wasm.expectType("v3", wasmType)
	num.silent()
}

// TestWasmOnlyServer: a Server made by New serves only the Wasm artifact; a
// native proxy is unserved, not sent the Wasm resource.
func TestWasmOnlyServer(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	native := connectArtifact(t, s.addr, xds.APIADS, "shop-native", "shop", "native")
	native.request("", "", "")
	wasm := connectArtifact(t, s.addr, xds.APIADS, "shop-wasm", "shop", "wasm")
	wasm.request("", "", "")
	wasm.ack(wasm.expect("v1"))
	native.silent()
	p := proxy(t, s, "shop-native")
	if p.State != rollout.StateUnserved || !strings.Contains(p.Error, "(it serves wasm)") {
		t.Fatalf("native proxy on a Wasm-only server: %+v", p)
	}
	s.change(t, "shop", "v2")
	wasm.expect("v2")
	native.silent()
}

// TestArtifactMissingFromBuild: a build without some artifact's resource is
// an error and changes nothing, for no artifact.
func TestArtifactMissingFromBuild(t *testing.T) {
	b := &artifactVersions{versions: &versions{v: map[string]string{"shop": "v1"}}}
	s := startArtifactServer(t, b)
	wasm := connectArtifact(t, s.addr, xds.APIADS, "shop-wasm", "shop", nil)
	wasm.request("", "", "")
	wasm.ack(wasm.expectType("v1", wasmType))
	b.omit = xds.ArtifactNative
	b.set("shop", "v2")
	if err := s.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), `no resource for artifact "native"`) {
		t.Fatalf("Refresh = %v, want the missing native resource", err)
	}
	if v, _ := s.Version("shop"); v != "v1" {
		t.Errorf("version %q, want v1 kept", v)
	}
	wasm.silent()
	b.omit = ""
	s.change(t, "shop", "v3")
	wasm.expectType("v3", wasmType)
}
