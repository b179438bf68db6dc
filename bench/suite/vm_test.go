package suite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	plain := variant{ID: "G", expect: expect}
	lean := variant{ID: "I", expect: expect, lean: true}
	for _, c := range []struct {
		name    string
		v       variant
		written [][2]string
		ok      bool
	}{
		{"header", plain, [][2]string{{"x-user-id", "user-0"}, {benchHeader, "treatment"}}, true},
		{"wrong value", plain, [][2]string{{benchHeader, "control"}}, false},
		{"missing", plain, [][2]string{{"x-other", "treatment"}}, false},
		{"dictionary", lean, [][2]string{{dictHeader, `a="x", bench="treatment"`}}, true},
		{"dictionary without member", lean, [][2]string{{dictHeader, `a="treatment"`}}, false},
	} {
		if err := checkProbe(c.v, c.written); (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestVMReport(t *testing.T) {
	runs := func(id string, mod, evict int, ns ...float64) []vmRun {
		var out []vmRun
		for i, v := range ns {
			out = append(out, vmRun{Variant: id, Module: mod, Evict: evict, Round: i + 1, NS: v,
				Calls: map[string]float64{"proxy_get_header_map_pairs": 1}})
		}
		return out
	}
	r := &vmResults{Tree: "def-dirty", Node: "v20", Modules: []module{{Bytes: 10, SHA256: "aaaa"}},
		Variants: []variantInfo{{ID: "E", Name: "e"}, {ID: "G", Name: "g"}}}
	for _, rs := range [][]vmRun{runs("E", 0, 0, 1000, 1100, 900), runs("G", 0, 0, 5000, 5200, 4800),
		runs("E", 0, vmEvictKiB, 3000, 3000, 3000), runs("G", 0, vmEvictKiB, 9000, 9500, 8500)} {
		r.Runs = append(r.Runs, rs...)
	}
	out := renderVM(r)
	warm, evicted, ok := strings.Cut(out, "## Caches evicted")
	if !ok {
		t.Fatalf("no evicted section:\n%s", out)
	}
	contains(t, "warm section", warm,
		"| E: e | 1.00 | – | proxy_get_header_map_pairs 1.00 |",
		"| G: g | 5.00 | 4.00 | proxy_get_header_map_pairs 1.00 |")
	contains(t, "evicted section", evicted,
		"| E: e | 3.00 | – |",
		"| G: g | 9.00 | 6.00 |")
	r.Base, r.BaseRev = "HEAD", "abc"
	r.Modules = append(r.Modules, module{Bytes: 11, SHA256: "bbbb"})
	r.Runs = append(r.Runs, runs("G", 1, 0, 9000, 9100, 8900)...)
	r.Runs = append(r.Runs, runs("G", 1, vmEvictKiB, 9000, 9500, 8500)...)
	warm, evicted, _ = strings.Cut(renderVM(r), "## Caches evicted")
	contains(t, "comparison", warm,
		"this tree against HEAD",
		"| G: g | 5.00 | 4.00 | 9.00 | -4.00 | ",
		"| **faster** |",
		"base HEAD (abc)")
	contains(t, "comparison, evicted", evicted, "| G: g | 9.00 | 6.00 | 9.00 | 0.00 | ", "no difference this run resolves")
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
	run, err := runHost(context.Background(), Options{EnvoyCPU: 0}, node, filepath.Join(root, "bench", "vm", "host.mjs"), wasm, vs[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	if run.NS <= 0 || run.Calls["proxy_add_header_map_value"] != 1 || run.Calls["proxy_get_header_map_pairs"] != 1 {
		t.Errorf("E in V8: %.0f ns, calls %v; want one header read and one add per request", run.NS, run.Calls)
	}
}
