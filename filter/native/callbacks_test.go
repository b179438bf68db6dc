//go:build cgo

package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/dynmod"
)

// importedCallbacks is every callback into Envoy the built module so
// imports: what it may call (and Envoy must resolve), whatever its sources
// declare or check.
func importedCallbacks(t *testing.T, so string) []string {
	t.Helper()
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF && strings.HasPrefix(s.Name, "envoy_dynamic_module_callback_") {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s imports no envoy_dynamic_module_callback_*", so)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// stubs are the bodies of the callbacks envoyhost answers with more than
// zero: logs go to its standard output, counters get ids. Every other
// callback is `long name() { return 0; }`: its arguments ignored, zero
// (false, 0, nothing) returned.
var stubs = map[string]string{
	"envoy_dynamic_module_callback_log": `void envoy_dynamic_module_callback_log(int32_t level, buffer m) {
  printf("log %d: %.*s\n", level, (int)m.length, m.ptr);
  fflush(stdout);
}`,
	"envoy_dynamic_module_callback_log_enabled":     `bool envoy_dynamic_module_callback_log_enabled(int32_t level) { return true; }`,
	"envoy_dynamic_module_callback_get_concurrency": `uint32_t envoy_dynamic_module_callback_get_concurrency(void) { return 2; }`,
	"envoy_dynamic_module_callback_http_filter_config_define_counter": `int32_t envoy_dynamic_module_callback_http_filter_config_define_counter(
    uintptr_t config, buffer name, buffer* labels, size_t n, size_t* id) {
  static size_t next;
  *id = next++;
  return 0;
}`,
}

// buildModule builds filter/native as Envoy loads it, a c-shared object
// (with AddressSanitizer if asan).
func buildModule(t *testing.T, dir string, asan bool) string {
	t.Helper()
	return buildPackage(t, dir, ".", asan)
}

// buildPackage builds package pkg (a main) as a c-shared object in dir
// (with AddressSanitizer if asan).
func buildPackage(t *testing.T, dir, pkg string, asan bool) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	so := filepath.Join(dir, "liballot.so")
	args := []string{"build", "-buildmode=c-shared", "-o", so}
	if asan {
		args = append(args, "-asan")
	}
	cmd := exec.Command(goTool, append(args, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return so
}

// buildHost builds envoyhost exporting every callback in callbacks but
// omit (with AddressSanitizer if asan: a module built with -asan needs its
// runtime in the host).
func buildHost(t *testing.T, dir string, callbacks []string, omit string, asan bool) string {
	t.Helper()
	return buildHostFrom(t, dir, "envoyhost.c", callbacks, func(name string) bool { return name == omit }, asan)
}

// buildHostFrom builds testdata/host as a host exporting every callback in
// callbacks that skip does not name: those host defines itself, or one
// left missing.
func buildHostFrom(t *testing.T, dir, host string, callbacks []string, skip func(string) bool, asan bool) string {
	t.Helper()
	var src strings.Builder
	src.WriteString("#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\n")
	src.WriteString("typedef struct { const char* ptr; size_t length; } buffer;\n\n")
	for _, name := range callbacks {
		if skip(name) {
			continue
		}
		if body, ok := stubs[name]; ok {
			src.WriteString(body + "\n")
			continue
		}
		fmt.Fprintf(&src, "long %s() { return 0; }\n", name)
	}
	stubsFile := filepath.Join(dir, "callbacks.c")
	if err := os.WriteFile(stubsFile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	bin := filepath.Join(dir, strings.TrimSuffix(host, ".c"))
	args := []string{"-std=gnu11", "-rdynamic", "-o", bin, filepath.Join("testdata", host), stubsFile, "-ldl"}
	if asan {
		args = append(args, "-fsanitize=address")
	}
	cmd := exec.Command(cc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return bin
}

// TestMissingCallbackRefused loads the built module in a host that
// exports every callback the module imports (its undefined dynamic
// symbols) but one, as an Envoy of another ABI might, for each one: the
// module must not call the missing one (a jump to address 0, which would
// crash Envoy) but refuse every configuration, naming the callback and the
// ABI it was built for — through Envoy's log, or on standard error when
// the missing callback is the log itself. With every callback present, it
// accepts the configuration. A callback only a local reply needs
// (dynmod.LocalReplyCallbacks) is the exception: without it, a
// configuration that answers no request is accepted all the same (one that
// answers requests is refused naming it: nativemod's TestAnswerRefusal).
// Where Go supports -asan, it runs again with the module and the host
// under AddressSanitizer.
func TestMissingCallbackRefused(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testMissingCallbackRefused(t, false) })
	t.Run("asan", func(t *testing.T) {
		if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
			t.Skipf("go build -asan does not support %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		testMissingCallbackRefused(t, true)
	})
}

func testMissingCallbackRefused(t *testing.T, asan bool) {
	so := buildModule(t, t.TempDir(), asan)
	callbacks := importedCallbacks(t, so)
	const config = `{"version":"v1","experiments":[{"key":"split","variations":["a","b"],"weights":[0.5,0.5]}]}`
	for _, omit := range append([]string{""}, callbacks...) {
		name := omit
		if name == "" {
			name = "none"
		}
		t.Run(strings.TrimPrefix(name, "envoy_dynamic_module_callback_"), func(t *testing.T) {
			hostDir := t.TempDir()
			bin := buildHost(t, hostDir, callbacks, omit, asan)
			var stdout, stderr strings.Builder
			cmd := exec.Command(bin, so, config)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			out := stdout.String()
			if err != nil {
				t.Fatalf("envoyhost: %v (a crash instead of a refusal)\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			if !strings.Contains(out, "program_init: "+dynmod.ABIVersion+"\n") {
				t.Errorf("program_init did not return the ABI version\nstdout:\n%s", out)
			}
			if omit == "" || slices.Contains(dynmod.LocalReplyCallbacks(), omit) {
				if !strings.Contains(out, "config_new: accepted") || strings.Contains(out+stderr.String(), "lacks") {
					t.Errorf("with every callback a configuration without answers needs: want it accepted\nstdout:\n%s\nstderr:\n%s", out, stderr.String())
				}
				return
			}
			if !strings.Contains(out, "config_new: refused") {
				t.Errorf("without %s: want the configuration refused\nstdout:\n%s", omit, out)
			}
			// The refusal: at critical level (5) through Envoy's log, or on
			// standard error without one.
			where, prefix := out, "log 5: allot: configuration rejected: "
			if omit == "envoy_dynamic_module_callback_log" {
				where, prefix = stderr.String(), "allot: configuration rejected: "
			}
			if !slices.ContainsFunc(strings.Split(where, "\n"), func(line string) bool {
				return strings.HasPrefix(line, prefix) && strings.Contains(line, omit) && strings.Contains(line, "ABI "+dynmod.ABIVersion)
			}) {
				t.Errorf("without %s: no line %q... naming it and ABI %s\nstdout:\n%s\nstderr:\n%s", omit, prefix, dynmod.ABIVersion, out, stderr.String())
			}
		})
	}
}
