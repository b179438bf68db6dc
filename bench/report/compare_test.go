package report

import (
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
)

// TestCompareReport: each variant's difference is called faster or slower
// only when its whole interval lies on one side of 0, and identical
// modules are flagged as such.
func TestCompareReport(t *testing.T) {
	rounds := func(vals ...float64) []float64 { return vals }
	c := &Comparison{Base: "HEAD~1", BaseRev: "abc", Tree: "def-dirty",
		Modules: [2]variant.Module{{Bytes: 10, SHA256: "aaaaaaaaaaaaaaaa"}, {Bytes: 11, SHA256: "bbbbbbbbbbbbbbbb"}},
		Variants: []variant.Info{{ID: "A"}, {ID: "G", Name: "g"}, {ID: "G-base"}, {ID: "H", Name: "h"}, {ID: "H-base"},
			{ID: "J", Name: "j"}, {ID: "J-base"}},
		Paired: &Paired{Rounds: 6, Requests: 100, CPU: map[string][]float64{
			"A":      rounds(20, 20, 20, 20, 20, 20),
			"G":      rounds(40, 41, 39, 40, 42, 40),
			"G-base": rounds(50, 50, 50, 50, 50, 50),
			"H":      rounds(60, 61, 59, 60, 62, 60),
			"H-base": rounds(50, 50, 50, 50, 50, 50),
			"J":      rounds(45, 55, 40, 60, 50, 52),
			"J-base": rounds(50, 50, 50, 50, 50, 50),
		}},
	}
	out := RenderCompare(c)
	contains(t, "comparison", out,
		"| G: g | +20.0 | +30.0 | -10.0 | ",
		"| **faster** by 10.0 µs (33% of the base's addition) |",
		"| H: h | +40.0 | +30.0 | +10.0 | ",
		"| **slower** by 10.0 µs (33% of the base's addition) |",
		"| J: j | +31.0 | +30.0 | +1.0 | ",
		"| no difference this run resolves |",
		"| revision | def-dirty | HEAD~1 (abc) |",
	)
	if strings.Contains(out, "identical") {
		t.Errorf("different modules reported identical:\n%s", out)
	}
	c.Modules[1] = c.Modules[0]
	contains(t, "comparison", RenderCompare(c), "The two modules are identical")
}
