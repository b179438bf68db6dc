//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/internal/harness"
)

// TestRejectedConfigurationKeepsServing pushes a configuration the filter
// refuses (as a mis-configured control plane might): Envoy NACKs it and the
// previous assignments keep flowing. ECDS is served by go-control-plane's
// snapshot cache on a real gRPC stream, so the test controls every byte.
func TestRejectedConfigurationKeepsServing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wasm := harness.MustBuildWasm(t, "./filter")
	mesh := translate.Mesh{WasmPath: wasm}
	snapshots := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, snapshots, nil))
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	push := func(version string, config map[string]any) {
		t.Helper()
		st, err := structpb.NewStruct(config)
		if err != nil {
			t.Fatal(err)
		}
		ext, err := translate.WasmExtension(st, mesh)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ExtensionConfigType: {ext}})
		if err != nil {
			t.Fatal(err)
		}
		if err := snapshots.SetSnapshot(ctx, "nack-proxy", snap); err != nil {
			t.Fatal(err)
		}
	}
	good := map[string]any{"version": "good", "experiments": []any{map[string]any{
		"key": "stable", "variations": []any{"old", "new"}, "weights": []any{1, 0}}}}
	push("v1", good)

	echo := harness.MustStartEcho(t)
	_, echoPort, _ := splitHostPort(echo)
	p := startEnvoy(t, "envoy-configs/sidecar.yaml", lis.Addr().(*net.TCPAddr).Port, wasm, nil, "nack-proxy", "nack", map[string]string{
		"port_value: 8081": "port_value: " + echoPort,
	})
	waitValue := func(want string) {
		harness.MustEventually(t, 10*time.Second, func() error {
			r, err := p.get(map[string][]string{"x-user-id": {"u"}})
			if err != nil {
				return err
			}
			if v := r.Header("x-experiment-stable"); len(v) != 1 || v[0] != want {
				return fmt.Errorf("x-experiment-stable = %q, want [%s]", v, want)
			}
			return nil
		})
	}
	waitValue("old")

	// An experiment key the engine refuses: on_configure returns false.
	push("v2", map[string]any{"version": "bad", "experiments": []any{map[string]any{
		"key": "Not A Key", "variations": []any{"x", "y"}}}})
	harness.MustEventually(t, 10*time.Second, func() error {
		for name, v := range p.MustStats(t) {
			if strings.HasPrefix(name, "extension_config_discovery.") && strings.HasSuffix(name, "allot.config_fail") && v > 0 {
				return nil
			}
		}
		return fmt.Errorf("envoy has not rejected the configuration (no extension_config_discovery.*allot.config_fail)")
	})
	for range 50 {
		r, err := p.get(map[string][]string{"x-user-id": {"u"}})
		if err != nil {
			t.Fatal(err)
		}
		if v := r.Header("x-experiment-stable"); len(v) != 1 || v[0] != "old" {
			t.Fatalf("after a rejected configuration x-experiment-stable = %q, want the previous [old]", v)
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != "good" {
			t.Fatalf("after a rejected configuration x-experiments-version = %q, want [good]", v)
		}
	}
	if !strings.Contains(p.MustLog(t), "configuration rejected") {
		t.Error("the filter did not log why it rejected the configuration")
	}

	// The next valid configuration applies normally.
	good["experiments"].([]any)[0].(map[string]any)["weights"] = []any{0, 1}
	push("v3", good)
	waitValue("new")
}
