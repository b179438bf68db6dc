package report

import (
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

func TestVMReport(t *testing.T) {
	runs := func(id string, mod, evict int, ns ...float64) []VMRun {
		var out []VMRun
		for i, v := range ns {
			out = append(out, VMRun{Variant: id, Module: mod, Evict: evict, Round: i + 1, NS: v,
				Calls: map[string]float64{"proxy_get_header_map_pairs": 1}})
		}
		return out
	}
	r := &VMResults{Tree: "def-dirty", Node: "v20", Modules: []variant.Module{{Bytes: 10, SHA256: "aaaa"}},
		Variants: []variant.Info{{ID: "E", Name: "e"}, {ID: "G", Name: "g"}}}
	for _, rs := range [][]VMRun{runs("E", 0, 0, 1000, 1100, 900), runs("G", 0, 0, 5000, 5200, 4800),
		runs("E", 0, VMEvictKiB, 3000, 3000, 3000), runs("G", 0, VMEvictKiB, 9000, 9500, 8500)} {
		r.Runs = append(r.Runs, rs...)
	}
	out := RenderVM(r)
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
	r.Modules = append(r.Modules, variant.Module{Bytes: 11, SHA256: "bbbb"})
	r.Runs = append(r.Runs, runs("G", 1, 0, 9000, 9100, 8900)...)
	r.Runs = append(r.Runs, runs("G", 1, VMEvictKiB, 9000, 9500, 8500)...)
	warm, evicted, _ = strings.Cut(RenderVM(r), "## Caches evicted")
	contains(t, "comparison", warm,
		"this tree against HEAD",
		"| G: g | 5.00 | 4.00 | 9.00 | -4.00 | ",
		"| **faster** |",
		"base HEAD (abc)")
	contains(t, "comparison, evicted", evicted, "| G: g | 9.00 | 6.00 | 9.00 | 0.00 | ", "no difference this run resolves")
}
