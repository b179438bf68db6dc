package suite

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/internal/harness"
)

// TestCModuleExportsEveryHook: the C module (variant O) exports exactly the
// hooks filter/dynmod exports — from Go (exports.go) and from C (its .c
// files: hooks.c, and warm.c's request hook), each hook once — the set
// Envoy 1.40 requires of an HTTP filter module.
func TestCModuleExportsEveryHook(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(root, "filter", "dynmod")
	goHooks := matches(t, filepath.Join(dir, "exports.go"), `^//export (envoy_dynamic_module_on_\w+)`)
	sources, err := filepath.Glob(filepath.Join(dir, "*.c"))
	if err != nil {
		t.Fatal(err)
	}
	var inC []string
	for _, src := range sources {
		for _, h := range matches(t, src, `^\w[^(]*\b(envoy_dynamic_module_on_\w+)\(`) {
			if slices.Contains(goHooks, h) || slices.Contains(inC, h) {
				t.Errorf("%s is defined twice (exports.go and filter/dynmod's C files)", h)
			}
			inC = append(inC, h)
		}
	}
	if len(goHooks) != 3 {
		t.Errorf("exports.go has %d hooks, want 3 (program-init, config new and destroy): %q", len(goHooks), goHooks)
	}
	all := append(goHooks, inC...)
	cHooks := matches(t, filepath.Join(root, cModuleSource), `^EXPORT [^(]*\b(envoy_dynamic_module_on_\w+)\(`)
	slices.Sort(all)
	slices.Sort(cHooks)
	if len(all) < 20 || !slices.Equal(all, cHooks) {
		t.Errorf("hooks differ:\nfilter/dynmod: %q\n%s: %q", all, cModuleSource, cHooks)
	}
}

// TestCModuleHash runs the C module's request hook against a fake host
// compiled with it and compares the header it adds with the engine's hash
// (what the pre-flight checks in Envoy).
func TestCModuleHash(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	root, dir := repoRoot(t), t.TempDir()
	drv := filepath.Join(dir, "driver.c")
	if err := os.WriteFile(drv, []byte(cFakeHost), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "driver")
	cmd := exec.Command("gcc", "-O2", "-o", bin, filepath.Join(root, cModuleSource), drv)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	ids := []string{"user-0", "user-1", "user-999", "alice", "bob", "ünïcode-ид"}
	out, err := exec.Command(bin, ids...).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(ids) {
		t.Fatalf("driver printed %q for %d ids", got, len(ids))
	}
	for i, id := range ids {
		want, _ := hashExpect(id)
		if got[i] != benchHeader+": "+want {
			t.Errorf("x-user-id %q: the module added %q, want %s: %s", id, got[i], benchHeader, want)
		}
	}
	// The module builds as make bench builds it.
	if err := harness.BuildCShared(context.Background(), root, filepath.Join(dir, "libcdynmod.so"), cModuleSource); err != nil {
		t.Fatal(err)
	}
}

// cFakeHost defines the three callbacks the C module calls over a request
// of two headers, the second x-user-id = argv[i], and prints what it adds.
const cFakeHost = `
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
typedef struct { const char* ptr; size_t length; } buffer;
typedef struct { const char* key_ptr; size_t key_length; const char* value_ptr; size_t value_length; } header;
static const char* id;
size_t envoy_dynamic_module_callback_http_get_headers_size(uintptr_t f, int32_t t) { return 2; }
bool envoy_dynamic_module_callback_http_get_headers(uintptr_t f, int32_t t, header* h) {
  h[0] = (header){":path", 5, "/", 1};
  h[1] = (header){"x-user-id", 9, id, strlen(id)};
  return true;
}
bool envoy_dynamic_module_callback_http_add_header(uintptr_t f, int32_t t, buffer k, buffer v) {
  printf("%.*s: %.*s\n", (int)k.length, k.ptr, (int)v.length, v.ptr);
  return true;
}
int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t, uintptr_t, bool);
int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) { id = argv[i]; envoy_dynamic_module_on_http_filter_request_headers(1, 1, true); }
  return 0;
}
`

// matches returns the first group of re on each line of the file at path.
func matches(t *testing.T, path, re string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rx := regexp.MustCompile(re)
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if g := rx.FindStringSubmatch(sc.Text()); g != nil {
			out = append(out, g[1])
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
