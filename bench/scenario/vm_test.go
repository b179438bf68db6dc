package scenario

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

// The VM benchmark runs E and the chosen Allot variants with their
// configurations written beside them.
func TestVMVariants(t *testing.T) {
	raw := t.TempDir()
	vs, err := vmVariants(raw, "HJ")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.ID+":"+filepath.Base(v.config))
	}
	if want := "E:- H:vm-50.json J:vm-50-lean.json"; strings.Join(got, " ") != want {
		t.Errorf("variants %q, want %q", strings.Join(got, " "), want)
	}
	if b, err := os.ReadFile(filepath.Join(raw, "vm-50-lean.json")); err != nil || !strings.Contains(string(b), "ASSIGNMENT_HEADERS_DICTIONARY") {
		t.Errorf("lean configuration: %v %.80s", err, b)
	}
	if vs, _ = vmVariants(raw, ""); len(vs) != 6 {
		t.Errorf("%d variants without -only, want E–J", len(vs))
	}
}

// A probe whose header is missing or differs from the engine's assignment
// fails the run.
func TestCheckProbe(t *testing.T) {
	expect := func(string) (string, error) { return "treatment", nil }
	plain := variant.Variant{ID: "G", Expect: expect}
	lean := variant.Variant{ID: "I", Expect: expect, Lean: true}
	for _, c := range []struct {
		name    string
		v       variant.Variant
		written [][2]string
		ok      bool
	}{
		{"header", plain, [][2]string{{"x-user-id", "user-0"}, {variant.BenchHeader, "treatment"}}, true},
		{"wrong value", plain, [][2]string{{variant.BenchHeader, "control"}}, false},
		{"missing", plain, [][2]string{{"x-other", "treatment"}}, false},
		{"dictionary", lean, [][2]string{{variant.DictHeader, `a="x", bench="treatment"`}}, true},
		{"dictionary without member", lean, [][2]string{{variant.DictHeader, `a="treatment"`}}, false},
	} {
		if err := checkProbe(c.v, c.written); (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// The JavaScript host runs a real module: the minimal filter E, built as
// the benchmark builds it, adds its header in V8.
func TestHostRunsModule(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: the VM benchmark needs it")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(t.TempDir(), "minwasm.wasm")
	if err := goBuild(context.Background(), root, wasm, "./bench/minwasm", true); err != nil {
		t.Fatal(err)
	}
	vs, err := vmVariants(t.TempDir(), "F")
	if err != nil {
		t.Fatal(err)
	}
	run, err := runHost(context.Background(), variant.Options{EnvoyCPU: 0}, node, filepath.Join(root, "bench", "vm", "host.mjs"), wasm, vs[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	if run.NS <= 0 || run.Calls["proxy_add_header_map_value"] != 1 || run.Calls["proxy_get_header_map_pairs"] != 1 {
		t.Errorf("E in V8: %.0f ns, calls %v; want one header read and one add per request", run.NS, run.Calls)
	}
}
