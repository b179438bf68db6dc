package harness

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
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
// per process by pkg and env, so every build after the first reuses the
// binary.
func Build(pkg string, env ...string) (string, error) {
	return build(pkg, binaryName(pkg), nil, env)
}

// MustBuild is Build that fails the test on error.
func MustBuild(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	return must[string](t)(Build(pkg, env...))
}

// WasmFlags and WasmEnv build a proxy-wasm module, as `make build-filter`
// does: `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`.
var (
	WasmFlags = []string{"-buildmode=c-shared"}
	WasmEnv   = []string{"GOOS=wasip1", "GOARCH=wasm"}
)

// BuildWasm compiles pkg as a proxy-wasm module (WasmFlags, WasmEnv) and
// returns the path of the .wasm file. Like Build, it runs from the
// repository root and caches per process.
func BuildWasm(pkg string) (string, error) {
	return build(pkg, binaryName(pkg)+".wasm", WasmFlags, WasmEnv)
}

// MustBuildWasm is BuildWasm that fails the test on error.
func MustBuildWasm(t testing.TB, pkg string) string {
	t.Helper()
	return must[string](t)(BuildWasm(pkg))
}

// BuildNative compiles pkg as an Envoy dynamic module named name (e.g.
// "liballot.so"): `CGO_ENABLED=1 go build -buildmode=c-shared`, with the
// build tags given. Like Build, it runs from the repository root and caches
// per process.
func BuildNative(pkg, name string, tags ...string) (string, error) {
	flags := []string{"-buildmode=c-shared"}
	if len(tags) > 0 {
		flags = append(flags, "-tags", strings.Join(tags, ","))
	}
	return build(pkg, name, flags, []string{"CGO_ENABLED=1"})
}

// MustBuildNative is BuildNative that fails the test on error.
func MustBuildNative(t testing.TB, pkg, name string, tags ...string) string {
	t.Helper()
	return must[string](t)(BuildNative(pkg, name, tags...))
}

func build(pkg, name string, flags, env []string) (string, error) {
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
	return e.out, e.err
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

	if err := GoBuild(context.Background(), root, out, pkg, flags, env...); err != nil {
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

// GoBuild runs `go build flags... -o out pkg` in the module directory dir
// with env ("KEY=value") added to the environment. It writes where it is
// told and caches nothing; Build is the cached form tests use.
func GoBuild(ctx context.Context, dir, out, pkg string, flags []string, env ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build %s: go command not in PATH: %w", pkg, err)
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s go %s: %w\n%s", strings.Join(env, " "), strings.Join(args, " "), err, msg)
	}
	return nil
}

// CSharedFlags are the compiler flags BuildCShared passes: an optimized,
// position-independent shared object.
var CSharedFlags = []string{"-O2", "-shared", "-fPIC"}

// BuildCShared compiles the C sources srcs into the shared object out
// (`cc -O2 -shared -fPIC -o out srcs...`, with cc $CC or gcc), run in dir.
func BuildCShared(ctx context.Context, dir, out string, srcs ...string) error {
	cc := cmp.Or(os.Getenv("CC"), "gcc")
	args := append(append(append([]string(nil), CSharedFlags...), "-o", out), srcs...)
	cmd := exec.CommandContext(ctx, cc, args...)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cc, strings.Join(args, " "), err, msg)
	}
	return nil
}
