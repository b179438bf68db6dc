package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/wire"
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

// TestCModuleHash runs the C module's request hook (variant O: no
// filter_config) against a fake host compiled with it and compares the
// header it adds with the engine's hash (what the pre-flight checks in
// Envoy).
func TestCModuleHash(t *testing.T) {
	bin := buildCFakeHost(t)
	ids := []string{"user-0", "user-1", "user-999", "alice", "bob", "ünïcode-ид"}
	got := runCFakeHost(t, bin, "", ids)
	for i, id := range ids {
		want, _ := variant.HashExpect(id)
		if w := []string{"add\t" + variant.BenchHeader + "\t" + want}; !slices.Equal(got[i], w) {
			t.Errorf("x-user-id %q: the module called %q, want %q", id, got[i], w)
		}
	}
	// The module builds as make bench builds it.
	if err := harness.BuildCShared(context.Background(), repoRoot(t), filepath.Join(t.TempDir(), "libcdynmod.so"), cModuleSource); err != nil {
		t.Fatal(err)
	}
}

// TestCModuleReplaysScript: variant o's filter_config — U's write script —
// reaches the C module, which makes per request exactly the script's
// writes with the callbacks Allot's C warm path makes them with: one
// add_header per header in the script's order (the unit's variation in
// place of floor.Var), the exposure record as filter state under "wasm." +
// its path, then one route clear.
func TestCModuleReplaysScript(t *testing.T) {
	var o variant.Variant
	for _, v := range variant.All() {
		if v.ID == "o" {
			o = v
		}
	}
	p := variant.NewPaths("/repo")
	if !o.InterleavedOnly() || o.Module == nil || o.Module(p) != p.CDynmod {
		t.Fatalf("variant o: interleaved only %v, module %v; want true, the C module", o.InterleavedOnly(), o.Module != nil)
	}
	sc, _, _, err := variant.FloorWrites(variant.FilterConfigJSON(50))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := o.Filters(p)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(fs)
	var got []struct {
		TypedConfig struct {
			Config struct {
				Type  string `json:"@type"`
				Value string `json:"value"`
			} `json:"filter_config"`
		} `json:"typed_config"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 {
		t.Fatalf("variant o's filters %s: %v", raw, err)
	}
	cfg := got[0].TypedConfig.Config
	if cfg.Type != "type.googleapis.com/google.protobuf.StringValue" || cfg.Value != sc.String() {
		t.Fatalf("variant o's filter_config %+v, want U's write script as a StringValue", cfg)
	}
	if len(sc.Headers) < 10 || len(sc.Props) != 1 || sc.Props[0].Name != wire.ExposureProperty {
		t.Fatalf("the script has %d headers and properties %+v, want Q's (about 17 and the exposure record)", len(sc.Headers), sc.Props)
	}

	bin := buildCFakeHost(t)
	ids := []string{"user-0", "user-1", "user-500", "user-999", "ünïcode-ид"}
	calls := runCFakeHost(t, bin, cfg.Value, ids)
	variations := map[string]bool{}
	for i, id := range ids {
		v, _ := variant.HashExpect(id)
		variations[v] = true
		var want []string
		for _, h := range sc.Headers {
			want = append(want, "add\t"+h.Name+"\t"+strings.Replace(h.Value, floor.Var, v, 1))
		}
		for _, pr := range sc.Props {
			want = append(want, "state\twasm."+pr.Name+"\t"+strings.Replace(pr.Value, floor.Var, v, 1))
		}
		want = append(want, "clear")
		if !slices.Equal(calls[i], want) {
			t.Errorf("x-user-id %q (%s): the module called\n%q\nwant\n%q", id, v, calls[i], want)
		}
	}
	if len(variations) != 2 {
		t.Errorf("the ids cover variations %v, want both", variations)
	}
}

// TestCModuleRefusesBadScripts: a filter_config the C module cannot read as
// a write script — one floor.Parse refuses, or one past the module's bounds
// (64 writes of each kind, 64 KiB) — is refused at configuration time.
func TestCModuleRefusesBadScripts(t *testing.T) {
	many := func(kind string, n int) string {
		return floor.Magic + "add\n" + strings.Repeat(kind+"\tx-h\tv\n", n)
	}
	cases := []struct {
		name, cfg string
		parses    bool // floor.Parse accepts it
	}{
		{"no magic", "add\nheader\tx-a\t1\n", false},
		{"magic only", floor.Magic, false},
		{"bad mode", floor.Magic + "replace\nheader\tx-a\t1\n", false},
		{"bad kind", floor.Magic + "add\ntrailer\tx-a\t1\n", false},
		{"two fields", floor.Magic + "add\nheader\tx-a\n", false},
		{"four fields", floor.Magic + "add\nheader\tx-a\t1\t2\n", false},
		{"no name", floor.Magic + "add\nheader\t\t1\n", false},
		{"empty line", floor.Magic + "add\nheader\tx-a\t1\n\nheader\tx-b\t2\n", false},
		{"65 headers", many("header", 65), true},
		{"65 properties", many("property", 65), true},
		{"over 64 KiB", floor.Magic + "add\nheader\tx-a\t" + strings.Repeat("v", 64<<10) + "\n", true},
	}
	bin := buildCFakeHost(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := floor.Parse(c.cfg); (err == nil) != c.parses {
				t.Fatalf("floor.Parse: %v, want accepted %v", err, c.parses)
			}
			if got := runCFakeHost(t, bin, c.cfg, nil); !slices.Equal(got[0], []string{"refused"}) {
				t.Errorf("the module answered %q, want the configuration refused", got)
			}
		})
	}
	// At the bounds it accepts.
	for _, cfg := range []string{many("header", 64), many("property", 64), floor.Magic + "rewrite\n"} {
		if got := runCFakeHost(t, bin, cfg, nil); len(got) != 0 {
			t.Errorf("the module answered %q for a script within its bounds", got)
		}
	}
}

// buildCFakeHost compiles the C module with cFakeHost into a program.
func buildCFakeHost(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	root, dir := repoRoot(t), t.TempDir()
	drv := filepath.Join(dir, "driver.c")
	if err := os.WriteFile(drv, []byte(cFakeHost), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "driver")
	cmd := exec.Command("gcc", "-O2", "-Wall", "-fsanitize=address,undefined", "-o", bin, filepath.Join(root, cModuleSource), drv)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return bin
}

// runCFakeHost runs the fake host with filter_config cfg ("": none) over a
// request for each id and returns the callbacks each request made; a
// refused configuration is one request calling "refused".
func runCFakeHost(t *testing.T, bin, cfg string, ids []string) [][]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, append([]string{path}, ids...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
	}
	var reqs [][]string
	var cur []string
	for _, line := range strings.Split(string(out), "\n") {
		switch line {
		case "":
		case "end", "refused":
			if line == "refused" {
				cur = append(cur, line)
			}
			reqs = append(reqs, cur)
			cur = nil
		default:
			cur = append(cur, line)
		}
	}
	if len(reqs) != len(ids) && !(len(reqs) == 1 && slices.Equal(reqs[0], []string{"refused"})) {
		t.Fatalf("the fake host printed %q for %d ids", out, len(ids))
	}
	return reqs
}

// cFakeHost defines the callbacks the C module calls, over a request of
// the benchmark's headers with x-user-id = argv[i] (i ≥ 2), after creating
// a configuration with the contents of the file argv[1] as its
// filter_config (empty: none). It prints each callback that writes —
// "add TAB name TAB value", "state TAB key TAB value", "clear" — and "end"
// after each request, or "refused" if the configuration is.
const cFakeHost = `
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { const char* ptr; size_t length; } buffer;
typedef struct { const char* key_ptr; size_t key_length; const char* value_ptr; size_t value_length; } header;
static const char* id;
size_t envoy_dynamic_module_callback_http_get_headers_size(uintptr_t f, int32_t t) { return 7; }
bool envoy_dynamic_module_callback_http_get_headers(uintptr_t f, int32_t t, header* h) {
  h[0] = (header){":method", 7, "GET", 3};
  h[1] = (header){":path", 5, "/", 1};
  h[2] = (header){":authority", 10, "bench", 5};
  h[3] = (header){"x-user-id", 9, id, strlen(id)};
  h[4] = (header){"x-country", 9, "US", 2};
  h[5] = (header){"x-platform", 10, "ios", 3};
  h[6] = (header){"x-app-version", 13, "2.3.1", 5};
  return true;
}
bool envoy_dynamic_module_callback_http_add_header(uintptr_t f, int32_t t, buffer k, buffer v) {
  printf("add\t%.*s\t%.*s\n", (int)k.length, k.ptr, (int)v.length, v.ptr);
  return true;
}
bool envoy_dynamic_module_callback_http_set_filter_state_bytes(uintptr_t f, buffer k, buffer v) {
  printf("state\t%.*s\t%.*s\n", (int)k.length, k.ptr, (int)v.length, v.ptr);
  return true;
}
void envoy_dynamic_module_callback_http_clear_route_cache(uintptr_t f) { printf("clear\n"); }
uintptr_t envoy_dynamic_module_on_http_filter_config_new(uintptr_t, buffer, buffer);
void envoy_dynamic_module_on_http_filter_config_destroy(uintptr_t);
uintptr_t envoy_dynamic_module_on_http_filter_new(uintptr_t, uintptr_t);
void envoy_dynamic_module_on_http_filter_destroy(uintptr_t);
int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t, uintptr_t, bool);
int main(int argc, char** argv) {
  FILE* in = fopen(argv[1], "rb");
  if (in == NULL) return 2;
  static char cfg[1 << 20];
  size_t n = fread(cfg, 1, sizeof cfg, in);
  fclose(in);
  // The configuration is Envoy's to keep only for the call: copy it to
  // its own allocation, freed after, so that a module keeping a pointer
  // into it fails under AddressSanitizer.
  char* copy = malloc(n + 1);
  memcpy(copy, cfg, n);
  uintptr_t c = envoy_dynamic_module_on_http_filter_config_new(7, (buffer){"allot", 5}, (buffer){copy, n});
  free(copy);
  if (c == 0) { printf("refused\n"); return 0; }
  for (int i = 2; i < argc; i++) {
    id = argv[i];
    uintptr_t m = envoy_dynamic_module_on_http_filter_new(c, 9);
    envoy_dynamic_module_on_http_filter_request_headers(9, m, true);
    envoy_dynamic_module_on_http_filter_destroy(m);
    printf("end\n");
  }
  envoy_dynamic_module_on_http_filter_config_destroy(c);
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
