// Package harness is the one test environment of the repository: it starts,
// stops, waits on and reads the real processes that the end-to-end tests
// (e2e/) and the benchmark (bench/) run — Envoy from the project venv,
// binaries built from this repository (allotd, the filter's .wasm and .so,
// allot-xdsload, etcd), the in-process echo upstream — and holds what both
// measure them with: free ports, polling with deadlines, Envoy's admin
// (readiness, listeners, stats), RSS and CPU time from /proc, allotd's
// command line and admin API, bootstraps rendered from envoy-configs/, and a
// clock a test sets (Clock). (The benchmark's statistics are bench/stats.)
//
// Every helper is written once, as a core that returns an error and takes no
// testing.TB (the benchmark's main has none); a process a core starts is the
// caller's to stop (Terminate). A test calls the core through its testing.TB
// form, named Must + the core's name (MustLaunchEnvoy, MustBuild,
// MustEventually, e.MustStats, ...): it calls t.Helper, fails the test with
// t.Fatal where the core returns an error, and registers the cleanup with
// t.Cleanup, so that no process or port outlives the test.
//
// It is internal to the module: e2e and bench import it, and unit tests
// that need its polling or its Clock. It imports
// nothing from filter/ or control-plane/ (the echo upstream is internal/echo).
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pollInterval is how often Eventually and the wait helpers retry.
const pollInterval = 20 * time.Millisecond

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

// Eventually calls f every 20 ms until it returns nil, and returns nil
// then; if timeout passes or ctx ends first, it returns f's last error.
func Eventually(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met (%w): %w", ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// MustEventually is Eventually that fails the test with f's last error.
// Like t.Fatalf, it must be called from the goroutine running the test.
func MustEventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Eventually(context.Background(), timeout, f); err != nil {
		t.Fatal(err)
	}
}

// must is how a Must form returns its core's value: the function it
// returns fails t if the core's error is not nil.
func must[T any](t testing.TB) func(T, error) T {
	t.Helper()
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// MustWriteFile writes content to a file name in a fresh temporary
// directory of the test (os.WriteFile) and returns its path.
func MustWriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
