package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dynmodv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_modules/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// adsProxy is an ADS client standing in for one Envoy: it subscribes to the
// allot ECDS resource and acknowledges every response.
type adsProxy struct {
	resps chan *discoveryv3.DiscoveryResponse
	conn  *grpc.ClientConn // its connection, which the outcomes sink's exports share
}

// dial connects to addr without TLS until the test ends; ctx is
// cancelled then too.
func dial(t *testing.T, addr string) (conn *grpc.ClientConn, ctx context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	return conn, ctx
}

func connectProxy(t *testing.T, addr, node string, artifact any) *adsProxy {
	t.Helper()
	conn, ctx := dial(t, addr)
	return subscribeOn(t, ctx, conn, node, "shop", artifact)
}

// subscribeOn opens an ADS stream on conn as node of cluster (running
// artifact, if not nil) that acknowledges every response until ctx ends.
func subscribeOn(t *testing.T, ctx context.Context, conn *grpc.ClientConn, node, cluster string, artifact any) *adsProxy {
	t.Helper()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev3.Node{Id: node, Cluster: cluster}
	if artifact != nil {
		if n.Metadata, err = structpb.NewStruct(map[string]any{"allot.artifact": artifact}); err != nil {
			t.Fatal(err)
		}
	}
	req := &discoveryv3.DiscoveryRequest{Node: n, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	p := &adsProxy{resps: make(chan *discoveryv3.DiscoveryResponse, 10), conn: conn}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			p.resps <- r
			ack := &discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: []string{"allot"},
				VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
			if st.Send(ack) != nil {
				return
			}
		}
	}()
	return p
}

// next returns the resource of the next response and its version.
func (p *adsProxy) next(t *testing.T) (string, *corev3.TypedExtensionConfig) {
	t.Helper()
	select {
	case r := <-p.resps:
		ext := &corev3.TypedExtensionConfig{}
		if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(ext) != nil {
			t.Fatalf("response %v", r)
		}
		return r.GetVersionInfo(), ext
	case <-time.After(5 * time.Second):
		t.Fatal("no response within 5s")
	}
	return "", nil
}

// filterVersion is the version inside the filter configuration ext carries.
func filterVersion(t *testing.T, ext *corev3.TypedExtensionConfig) string {
	t.Helper()
	st := &structpb.Struct{}
	switch ext.GetTypedConfig().GetTypeUrl() {
	case "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm":
		w := &wasmv3.Wasm{}
		if err := ext.GetTypedConfig().UnmarshalTo(w); err != nil {
			t.Fatal(err)
		}
		if f := w.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename(); f != "/allot.wasm" {
			t.Errorf("wasm module %q, want the mesh's /allot.wasm", f)
		}
		if err := w.GetConfig().GetConfiguration().UnmarshalTo(st); err != nil {
			t.Fatal(err)
		}
	case "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter":
		n := &dynmodv3.DynamicModuleFilter{}
		if err := ext.GetTypedConfig().UnmarshalTo(n); err != nil {
			t.Fatal(err)
		}
		if f := n.GetDynamicModuleConfig().GetModule().GetLocal().GetFilename(); f != "/liballot.so" {
			t.Errorf("native module %q, want the mesh's /liballot.so", f)
		}
		if err := n.GetFilterConfig().UnmarshalTo(st); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("filter type %s", ext.GetTypedConfig().GetTypeUrl())
	}
	return st.GetFields()["version"].GetStringValue()
}

// TestArtifactsThroughAllotd: allotd serves a Wasm proxy and a native proxy
// of one cluster the same configuration version, each in its artifact's
// resource; a proxy naming an unknown artifact gets nothing, and the admin
// API's rollout reports it (result "unserved" for a waited write).
func TestArtifactsThroughAllotd(t *testing.T) {
	a := start(t)
	wasm := connectProxy(t, a.XDS.String(), "shop-wasm", nil)
	native := connectProxy(t, a.XDS.String(), "shop-native", "native")
	odd := connectProxy(t, a.XDS.String(), "shop-odd", "wasm32")

	v0w, extW := wasm.next(t)
	v0n, extN := native.next(t)
	if v0w != v0n || filterVersion(t, extW) != v0w || filterVersion(t, extN) != v0n {
		t.Fatalf("wasm proxy got %s, native proxy %s: want one version in both resources", v0w, v0n)
	}
	if extW.GetTypedConfig().GetTypeUrl() == extN.GetTypedConfig().GetTypeUrl() {
		t.Fatalf("both proxies got %s", extW.GetTypedConfig().GetTypeUrl())
	}

	body := `{"key":"btn","variations":["a","b"]}`
	req, err := http.NewRequest("POST", "http://"+a.Admin.String()+"/v1/experiments?wait=5s", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var waited struct{ Rollout json.RawMessage }
	if err := json.Unmarshal(b, &waited); err != nil {
		t.Fatal(err)
	}
	ro := &adminv1.Rollout{}
	if err := protojson.Unmarshal(waited.Rollout, ro); err != nil {
		t.Fatal(err)
	}
	v1w, extW := wasm.next(t)
	v1n, extN := native.next(t)
	if v1w == v0w || v1w != v1n || filterVersion(t, extW) != v1w || filterVersion(t, extN) != v1n {
		t.Fatalf("after the write: wasm %s, native %s (before %s)", v1w, v1n, v0w)
	}
	if ro.GetResult() != "unserved" || !strings.Contains(ro.GetError(), `"wasm32"`) || ro.GetTargets()["shop"] != v1w {
		t.Errorf("waited rollout: result %q error %q targets %v", ro.GetResult(), ro.GetError(), ro.GetTargets())
	}
	got := map[string]string{}
	for _, p := range ro.GetProxies() {
		got[p.GetNodeId()] = p.GetArtifact() + " " + p.GetState()
		if (p.GetState() == "unserved") != strings.Contains(p.GetError(), "allot.artifact") {
			t.Errorf("%s: state %s, error %q", p.GetNodeId(), p.GetState(), p.GetError())
		}
	}
	// The waited write lists the proxy that did not apply; counts has all.
	want := map[string]string{"shop-odd": "wasm32 unserved"}
	if !bytes.Equal(mustJSON(t, got), mustJSON(t, want)) {
		t.Errorf("proxies %v, want %v", got, want)
	}
	if c := ro.GetCounts(); len(c) != 2 || c["applied"] != 2 || c["unserved"] != 1 {
		t.Errorf("counts %v, want 2 applied, 1 unserved", c)
	}
	select {
	case r := <-odd.resps:
		t.Fatalf("the unserved proxy was sent version %s", r.GetVersionInfo())
	default:
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
