// Package harness starts, stops and waits on the real processes of an
// end-to-end test: Envoy from the project venv, binaries built from this
// repository (allotd, the filter's .wasm, allot-echo) and the in-process echo
// upstream. Every helper that takes a testing.TB calls t.Helper, fails the
// test with t.Fatalf instead of returning setup errors, and registers its
// cleanup with t.Cleanup so that no process or port outlives the test.
//
// It is an ordinary package (not _test) so that e2e tests and the benchmark
// (bench/suite) share it. The helpers in launch.go take no testing.TB —
// Launch, LaunchEnvoy, Terminate, PinnedCommand, Listener, ReadRSS,
// AdminStats, GoBuildTo, BuildCShared return errors and leave stopping to the
// caller — because the benchmark runs outside any test; keep them free of it. Only tests and the
// benchmark may import it; it imports nothing from filter/ or control-plane/.
package harness

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// pollInterval is how often Eventually and the wait helpers retry.
const pollInterval = 20 * time.Millisecond

// client is used for every HTTP request the harness makes. It never uses a
// proxy from the environment: all traffic stays on 127.0.0.1.
var client = &http.Client{
	Timeout: 10 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	},
}

// RepoRoot returns the repository root: the nearest directory at or above the
// working directory that contains go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// repoRoot is RepoRoot for helpers that have a t to fail.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Eventually calls f every 20 ms until it returns nil. If timeout passes
// first, the test fails with f's last error. Like t.Fatalf, it must be called
// from the goroutine running the test.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
			return
		}
		time.Sleep(pollInterval)
	}
}

var ports struct {
	sync.Mutex
	given map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// configuration that needs a port number before the listener exists (Envoy
// bootstraps, allotd flags). No port is handed out twice in one process.
// Prefer listening on 127.0.0.1:0 directly where the code allows it.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// freePort is FreePort for the helpers that take no testing.TB.
func freePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = make(map[int]bool)
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("find free port: close listener: %w", err)
		}
		if !ports.given[port] {
			ports.given[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find free port: 100 attempts returned ports already handed out")
}

// WriteFile writes content to a file name in a fresh temporary directory
// of the test and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
