package harness

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// buildDirPrefix names the per-process directory that holds built binaries.
// Directories left behind by test processes that have exited are removed
// the next time a process creates its own.
const buildDirPrefix = "allot-e2e-build-"

var builds struct {
	sync.Mutex
	dir     string
	entries map[string]*buildEntry
}

type buildEntry struct {
	once sync.Once
	out  string
	err  error
}

// Build compiles the Go package pkg (a path relative to the repository root
// such as "./control-plane/cmd/allotd", or an import path) with `go build`
// run from the repository root, and returns the path of the binary. env holds
// extra "KEY=value" environment entries for the go command. Results are cached
// per process by pkg and env, so every test after the first reuses the binary.
func Build(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	return build(t, pkg, binaryName(pkg), nil, env)
}

// BuildWasm compiles pkg as a proxy-wasm module,
// `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`, and returns the path
// of the .wasm file. Like Build, it runs from the repository root and caches
// per process.
func BuildWasm(t testing.TB, pkg string) string {
	t.Helper()
	return build(t, pkg, binaryName(pkg)+".wasm",
		[]string{"-buildmode=c-shared"},
		[]string{"GOOS=wasip1", "GOARCH=wasm"})
}

// BuildNative compiles pkg as an Envoy dynamic module named name (e.g.
// "liballot.so"): `CGO_ENABLED=1 go build -buildmode=c-shared`, with the
// build tags given. Like Build, it runs from the repository root and caches
// per process.
func BuildNative(t testing.TB, pkg, name string, tags ...string) string {
	t.Helper()
	flags := []string{"-buildmode=c-shared"}
	if len(tags) > 0 {
		flags = append(flags, "-tags", strings.Join(tags, ","))
	}
	return build(t, pkg, name, flags, []string{"CGO_ENABLED=1"})
}

func build(t testing.TB, pkg, name string, flags, env []string) string {
	t.Helper()
	key := strings.Join(append(append([]string{pkg, name}, flags...), env...), "\x00")

	builds.Lock()
	if builds.entries == nil {
		builds.entries = make(map[string]*buildEntry)
	}
	e, ok := builds.entries[key]
	if !ok {
		e = &buildEntry{}
		builds.entries[key] = e
	}
	builds.Unlock()

	e.once.Do(func() { e.out, e.err = goBuild(pkg, name, flags, env) })
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.out
}

func goBuild(pkg, name string, flags, env []string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := buildDir()
	if err != nil {
		return "", err
	}
	// One subdirectory per build so equal names (two packages both named
	// "main", or one package built twice with different env) never collide.
	sub, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	out := filepath.Join(sub, name)

	if err := GoBuildTo(context.Background(), root, out, pkg, flags, env...); err != nil {
		return "", err
	}
	return out, nil
}

// buildDir returns this process's directory for built binaries, creating it
// (and sweeping directories of dead processes) on first use.
func buildDir() (string, error) {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		return builds.dir, nil
	}
	sweepBuildDirs()
	dir, err := os.MkdirTemp("", buildDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("create build dir: %w", err)
	}
	builds.dir = dir
	return dir, nil
}

// sweepBuildDirs removes build directories whose owning process has exited.
// Errors are ignored: a leftover directory is harmless.
func sweepBuildDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), buildDirPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), buildDirPrefix)
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(m)
	}
}

// binaryName derives an output file name from a package pattern.
func binaryName(pkg string) string {
	name := path.Base(strings.TrimSuffix(filepath.ToSlash(pkg), "/"))
	if name == "." || name == "/" || name == "" {
		return "main"
	}
	return name
}
