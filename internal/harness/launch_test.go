package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLaunchTerminate: a process started without a test logs to the given
// file and is stopped by Terminate, which may be called again.
func TestLaunchTerminate(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p, err := Launch("sh", log, exec.Command("sh", "-c", "echo started; exec sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	MustEventually(t, 5*time.Second, func() error {
		if b, _ := os.ReadFile(log); !strings.Contains(string(b), "started") {
			return os.ErrNotExist
		}
		return nil
	})
	if p.Exited() {
		t.Fatal("exited before Terminate")
	}
	if killed := p.Terminate(); killed {
		t.Error("needed SIGKILL; sleep obeys SIGTERM")
	}
	if !p.Exited() || p.Terminate() {
		t.Error("not stopped, or a second Terminate killed something")
	}
	if _, err := Launch("nope", log, exec.Command(filepath.Join(t.TempDir(), "missing"))); err == nil {
		t.Error("Launch of a missing binary succeeded")
	}
}

func TestPinnedCommand(t *testing.T) {
	if got := PinnedCommand(1, "envoy", "-c", "x").Args; !slices.Equal(got, []string{"taskset", "-c", "1", "envoy", "-c", "x"}) {
		t.Errorf("pinned: %q", got)
	}
	if got := PinnedCommand(-1, "envoy", "-c", "x").Args; !slices.Equal(got, []string{"envoy", "-c", "x"}) {
		t.Errorf("unpinned: %q", got)
	}
}

// TestAdminStats: the admin's JSON is decoded and the filter reaches it as
// a query parameter (Envoy.Stat's).
func TestAdminStats(t *testing.T) {
	var query string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		w.Write([]byte(`{"stats":[{"name":"wasmcustom.allot.cache_hits","value":7}]}`))
	}))
	defer s.Close()
	e := &Envoy{adminURL: s.URL}
	got, ok, err := e.Stat("wasmcustom.allot.cache_hits")
	if err != nil || !ok || got != 7 {
		t.Fatalf("Stat = %v, %v, %v", got, ok, err)
	}
	if query != `format=json&filter=%5Ewasmcustom%5C.allot%5C.cache_hits%24` {
		t.Errorf("query %q", query)
	}
}

// TestBuildCShared builds a one-function shared object (gcc is what the
// benchmark needs; without it the test has nothing to check).
func TestBuildCShared(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil && os.Getenv("CC") == "" {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.c"), []byte("int f(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := BuildCShared(context.Background(), dir, "libf.so", "f.c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "libf.so")); err != nil {
		t.Fatal(err)
	}
	if err := BuildCShared(context.Background(), dir, "libg.so", "missing.c"); err == nil {
		t.Error("built from a missing source")
	}
}

// TestLaunchEnvoyExitsEarly: an "Envoy" that exits at once is reported
// with its log, not waited for until the timeout.
func TestLaunchEnvoyExitsEarly(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"bad bootstrap: $*\"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	boot := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(boot, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LaunchEnvoy(context.Background(), EnvoyOptions{Bootstrap: boot,
		Bin: bin, Name: "e", Dir: t.TempDir(), Timeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before ready") || !strings.Contains(err.Error(), "bad bootstrap: -c "+boot) {
		t.Errorf("err = %v, want an early exit with the log", err)
	}
	if strings.Contains(fmt.Sprint(err), "--service-node") {
		t.Errorf("LaunchEnvoy passed a node it was not given: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestAllotdArgs: a bbolt allotd and an etcd replica get their flags, and
// nothing they were not given.
func TestAllotdArgs(t *testing.T) {
	tests := []struct {
		name string
		a    Allotd
		want []string
	}{
		{"bbolt", Allotd{Admin: "a:1", XDS: "x:2", DB: "d.db", Tokens: "t.json", Wasm: "f.wasm", Native: "f.so", LogLevel: "debug", Extra: []string{"-mesh", "m.json"}},
			[]string{"-admin-addr", "a:1", "-xds-addr", "x:2", "-db", "d.db", "-tokens", "t.json", "-wasm-path", "f.wasm", "-native-path", "f.so", "-log-level", "debug", "-mesh", "m.json"}},
		{"etcd replica", Allotd{Admin: "a:1", XDS: "x:2", DB: "ignored.db", Store: "etcd://e:3", ReplicaID: "r1", LeaseTTL: 10 * time.Second, Tokens: "t.json", Wasm: "f.wasm"},
			[]string{"-admin-addr", "a:1", "-xds-addr", "x:2", "-store", "etcd://e:3", "-replica-id", "r1", "-lease-ttl", "10s", "-tokens", "t.json", "-wasm-path", "f.wasm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Args(); !slices.Equal(got, tt.want) {
				t.Errorf("Args() = %q\nwant     %q", got, tt.want)
			}
		})
	}
}

// TestConfigBootstrap: envoy-configs/sidecar.yaml's fixed ports, module
// and access log are moved, and Replace overrides a move.
func TestConfigBootstrap(t *testing.T) {
	c := ConfigBootstrap{Path: "envoy-configs/sidecar.yaml", Listener: 1001, Admin: 1002, XDS: 1003,
		Module: "/tmp/x/liballot.wasm", AccessLog: "/tmp/x/access.log", Replace: map[string]string{"port_value: 9901": "port_value: 0"}}
	path, err := c.Render(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"port_value: 1001", "port_value: 0}", "port_value: 1003", "filename: /tmp/x/liballot.wasm", "path: /tmp/x/access.log"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered bootstrap lacks %q", want)
		}
	}
	for _, gone := range []string{"port_value: 10000", "port_value: 9901", "port_value: 1002", "port_value: 18000", "bin/allot.wasm", "/dev/stdout"} {
		if strings.Contains(got, gone) {
			t.Errorf("rendered bootstrap still has %q", gone)
		}
	}
	c.Path = "envoy-configs/no-such.yaml"
	if _, err := c.Render(t.TempDir()); err == nil {
		t.Error("rendered a missing bootstrap")
	}
}
