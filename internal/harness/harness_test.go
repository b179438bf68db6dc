package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records fatal failures instead of failing the real test, so the
// harness's own failure paths can be tested. Fatal and Fatalf end the calling
// goroutine like the real ones; run the code under test with capture.
type fakeTB struct {
	testing.TB // the real test, for TempDir, Cleanup, Logf
	mu         sync.Mutex
	fatal      string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal != ""
}

// capture runs fn against a fakeTB and returns the fatal message, or "".
func capture(t *testing.T, fn func(testing.TB)) string {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "harness", "harness.go")); err != nil {
		t.Errorf("RepoRoot() = %s, not the repository root: %v", root, err)
	}
}

func TestRenderBootstrap(t *testing.T) {
	src := filepath.Join(t.TempDir(), "envoy.yaml")
	const in = "admin: {port_value: 9901}\nlistener: {port_value: 10000}\ncluster: {port_value: 100}\nwasm: /opt/filter.wasm\n"
	if err := os.WriteFile(src, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		replace   map[string]string
		want      string
		wantFatal string
	}{
		{
			name: "ports and paths",
			replace: map[string]string{
				"port_value: 9901":  "port_value: 4001",
				"port_value: 10000": "port_value: 4002",
				"/opt/filter.wasm":  "/tmp/x/filter.wasm",
			},
			want: "admin: {port_value: 4001}\nlistener: {port_value: 4002}\ncluster: {port_value: 100}\nwasm: /tmp/x/filter.wasm\n",
		},
		{
			name:    "overlapping keys prefer the longer",
			replace: map[string]string{"100": "7", "10000": "8"},
			want:    "admin: {port_value: 9901}\nlistener: {port_value: 8}\ncluster: {port_value: 7}\nwasm: /opt/filter.wasm\n",
		},
		{
			name:    "replacements are not replaced again",
			replace: map[string]string{"9901": "10000", "10000": "1"},
			want:    "admin: {port_value: 10000}\nlistener: {port_value: 1}\ncluster: {port_value: 100}\nwasm: /opt/filter.wasm\n",
		},
		{
			name:      "missing key fails naming it",
			replace:   map[string]string{"port_value: 9901": "x", "port_value: 12345": "y"},
			wantFatal: `"port_value: 12345"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out string
			fatal := capture(t, func(tb testing.TB) { out = MustRenderBootstrap(tb, src, tt.replace) })
			if tt.wantFatal != "" {
				if !strings.Contains(fatal, tt.wantFatal) {
					t.Fatalf("fatal = %q, want it to contain %s", fatal, tt.wantFatal)
				}
				return
			}
			if fatal != "" {
				t.Fatalf("unexpected fatal: %s", fatal)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("rendered:\n%s\nwant:\n%s", got, tt.want)
			}
			if b, _ := os.ReadFile(src); string(b) != in {
				t.Error("source file was modified")
			}
		})
	}
}

func TestFreePortUnique(t *testing.T) {
	seen := make(map[int]bool)
	for range 50 {
		p := MustFreePort(t)
		if p <= 0 || seen[p] {
			t.Fatalf("FreePort returned %d (seen before: %v)", p, seen[p])
		}
		seen[p] = true
	}
}

func TestEventually(t *testing.T) {
	t.Run("succeeds after retries", func(t *testing.T) {
		calls := 0
		MustEventually(t, 5*time.Second, func() error {
			calls++
			if calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
		if calls != 3 {
			t.Errorf("calls = %d, want 3", calls)
		}
	})
	t.Run("deadline reports last error", func(t *testing.T) {
		n := 0
		fatal := capture(t, func(tb testing.TB) {
			MustEventually(tb, 100*time.Millisecond, func() error {
				n++
				return fmt.Errorf("attempt %d", n)
			})
		})
		if want := fmt.Sprintf("attempt %d", n); !strings.Contains(fatal, want) {
			t.Errorf("fatal = %q, want it to contain %q", fatal, want)
		}
	})
}

func TestEnvoyBinaryFailsNotSkips(t *testing.T) {
	dir := t.TempDir()
	wrong := filepath.Join(dir, "envoy-wrong")
	script := "#!/bin/sh\necho 'envoy  version: abc/1.39.2/Clean/RELEASE/BoringSSL'\n"
	if err := os.WriteFile(wrong, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		bin       string
		wantFatal string
	}{
		{name: "missing", bin: filepath.Join(dir, "nope"), wantFatal: "make envoy"},
		{name: "wrong version", bin: wrong, wantFatal: "is not Envoy 1.40.x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ENVOY_BIN", tt.bin)
			fatal := capture(t, func(tb testing.TB) { MustEnvoyBinary(tb) })
			if !strings.Contains(fatal, tt.wantFatal) {
				t.Errorf("fatal = %q, want it to contain %q", fatal, tt.wantFatal)
			}
		})
	}
}

func TestParseStats(t *testing.T) {
	body := `{"stats":[
		{"name":"server.live","value":1},
		{"name":"http.ingress_http.downstream_rq_total","value":12345678901},
		{"name":"server.version_text","value":"1.40.0"},
		{"histograms":{"supported_quantiles":[0,50],"computed_quantiles":[]}}]}`
	got, err := parseStats([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"server.live": 1, "http.ingress_http.downstream_rq_total": 12345678901}
	if len(got) != len(want) {
		t.Errorf("parseStats = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if _, err := parseStats([]byte("server.live: 1")); err == nil {
		t.Error("parseStats accepted non-JSON")
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		n         int
		wantFirst string
		wantLines int
	}{
		{n: 3, wantFirst: "line 197", wantLines: 3},
		{n: 80, wantFirst: "line 120", wantLines: 80},
		{n: 500, wantFirst: "line 0", wantLines: 200},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			got, err := tailFile(path, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(got, "\n")
			if len(lines) != tt.wantLines || lines[0] != tt.wantFirst || lines[len(lines)-1] != "line 199" {
				t.Errorf("tailFile(%d) = %d lines from %q to %q", tt.n, len(lines), lines[0], lines[len(lines)-1])
			}
		})
	}
}

func TestReadRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmRSS comes from /proc")
	}
	rss, err := ReadRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("RSS of the test process = %d bytes, want at least 1 MiB", rss)
	}
}

func TestBinaryName(t *testing.T) {
	tests := map[string]string{
		"./control-plane/cmd/allotd":            "allotd",
		"./filter/":                             "filter",
		"github.com/allotmesh/allot/e2e/cmd/x/": "x",
		".":                                     "main",
	}
	for in, want := range tests {
		if got := binaryName(in); got != want {
			t.Errorf("binaryName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestChromiumBinaryFailsWithoutBrowser: no browser is a failure naming
// how to install one, never a skip.
func TestChromiumBinaryFailsWithoutBrowser(t *testing.T) {
	t.Setenv("CHROME_BIN", "")
	t.Setenv("PATH", t.TempDir())
	fatal := capture(t, func(tb testing.TB) { MustChromiumBinary(tb) })
	if !strings.Contains(fatal, "make chromium") {
		t.Errorf("fatal = %q, want a failure telling to run make chromium", fatal)
	}
	t.Setenv("CHROME_BIN", filepath.Join(t.TempDir(), "missing"))
	if fatal := capture(t, func(tb testing.TB) { MustChromiumBinary(tb) }); !strings.Contains(fatal, "CHROME_BIN") {
		t.Errorf("fatal = %q, want a failure naming CHROME_BIN", fatal)
	}
}

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

// TestEtcdReplica: a replica on a laid-out cluster gets its id, the
// cluster's -store, its lease and two distinct free ports.
func TestEtcdReplica(t *testing.T) {
	c, err := NewEtcdCluster("etcd", t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Replica(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.ReplicaID != "r2" || a.Store != c.StoreURL() || a.LeaseTTL != 10*time.Second || a.Admin == a.XDS || !strings.HasPrefix(a.Admin, "127.0.0.1:") {
		t.Errorf("Replica(1) = %+v", a)
	}
	if got := c.Command(0, "new").Args; !slices.Contains(got, "m0") || got[0] != "etcd" {
		t.Errorf("Command(0) = %v", got)
	}
}
