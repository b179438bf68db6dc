package suite

import (
	"fmt"
	"strings"
	"testing"
)

// TestFloorsSection: the report splits each target's variant into its
// floor and Allot's own work, and says whether the target lies below the
// floor (out of reach for any filter making those writes) or how much room
// it leaves.
func TestFloorsSection(t *testing.T) {
	round := func(add float64) []float64 { return []float64{20 + add, 21 + add, 22 + add} }
	res := &results{
		Variants: []variantInfo{{ID: "A"}, {ID: "E"}, {ID: "G"}, {ID: "H"}, {ID: "I"}, {ID: "J"},
			{ID: "K", FloorOf: "GH"}, {ID: "L", FloorOf: "IJ"}},
		Paired: &paired{CPU: map[string][]float64{
			"A": round(0), "E": round(10), "G": round(40), "H": round(50), "I": round(20), "J": round(30),
			"K": round(19), "L": round(11),
		}},
	}
	var b strings.Builder
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	out := b.String()
	for _, want := range []string{
		"| G | K | +19.0 µs (1.90 × E) | +40.0 µs (4.00 × E) | +21.0 µs | 1.25 × E (12.5 µs) |",
		"| J | L | +11.0 µs (1.10 × E) | +30.0 µs (3.00 × E) | +19.0 µs | 1.60 × E (16.0 µs) |",
		"G's floor alone adds 1.90 × E, above G's limit of 1.25 × E: no Go filter",
		"H's floor alone adds 1.90 × E, above H's limit of 1.60 × E",
		"I's floor adds 1.10 × E, within its limit of 1.25 × E: the target leaves Allot 1.5 µs for its own work, which takes 9.0 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("floors section lacks %q:\n%s", want, out)
		}
	}
	// No paired measurement, no section.
	b.Reset()
	res.Paired = nil
	floors(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	if b.Len() != 0 {
		t.Errorf("floors without an interleaved measurement wrote %q", b.String())
	}
}
