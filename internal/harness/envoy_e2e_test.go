//go:build e2e

package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMustLaunchEnvoyFailsFastOnBadBootstrap needs real Envoy, hence the e2e tag;
// it lives here to use this package's fakeTB.
func TestMustLaunchEnvoyFailsFastOnBadBootstrap(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("static_resources: {clusters: [{name: x, type: NOPE}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fatal := capture(t, func(tb testing.TB) {
		MustLaunchEnvoy(tb, EnvoyOptions{Bootstrap: bad})
	})
	if !strings.Contains(fatal, "exited before ready") {
		t.Errorf("fatal = %q, want an early-exit failure", fatal)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v to notice the exit; want well under the 30 s ready deadline", d)
	}
}

// TestLaunchEnvoy starts real Envoy outside the test's cleanup, as the
// benchmark does, finds its listener and stops it.
func TestLaunchEnvoy(t *testing.T) {
	boot := filepath.Join(t.TempDir(), "boot.yaml")
	if err := os.WriteFile(boot, []byte(`admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains: [{filters: [{name: envoy.filters.network.tcp_proxy, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: c}}]}]
  clusters: [{name: c, type: STATIC, load_assignment: {cluster_name: c}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := LaunchEnvoy(t.Context(), EnvoyOptions{Bootstrap: boot,
		Bin: MustEnvoyBinary(t), Name: "launched", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Terminate()
	addr, err := e.Listener()
	if err != nil || !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Errorf("Listener() = %q, %v", addr, err)
	}
	if v, ok, err := e.Stat("server.live"); err != nil || !ok || v != 1 {
		t.Errorf("Stat(server.live) = %v, %v, %v", v, ok, err)
	}
	if e.Terminate() || !e.Exited() {
		t.Error("not stopped by SIGTERM")
	}
}
