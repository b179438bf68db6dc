package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
