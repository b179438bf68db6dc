package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/config"
)

func variantByID(t *testing.T, id string) variant.Variant {
	t.Helper()
	v, err := variant.ByID(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStickyRowsPairLikeWithLike: every row of the cost tables (the
// stickiness, observe and OFREP rows) sets a variant
// against a baseline on the same artifact, with the same experiments and
// the same state of the cache (a cold variant's or a pool larger than the
// cache both miss it); exactly one of the two is a cost variant, measured
// in the interleaved section only; and each native sticky variant has the
// traffic of its Wasm twin.
func TestStickyRowsPairLikeWithLike(t *testing.T) {
	misses := func(v variant.Variant) bool { return v.Cold || v.Units() > config.DefaultCacheSize }
	for _, r := range slices.Concat(stickyRows, observeRows, ofrepRows) {
		x := variantByID(t, r.x)
		if !strings.Contains(r.what, "("+r.x) {
			t.Errorf("row %s: its text does not name it: %q", r.x, r.what)
		}
		if (x.Module != nil) != (r.artifact == "native") {
			t.Errorf("row %s: artifact %s, module %v", r.x, r.artifact, x.Module != nil)
		}
		if r.base == "" {
			continue
		}
		b := variantByID(t, r.base)
		if x.Allot != 50 || b.Allot != 50 || (x.Module == nil) != (b.Module == nil) || misses(x) != misses(b) || x.Lean || b.Lean ||
			x.Observe && (b.Observe || b.Sticky || x.Sticky) {
			t.Errorf("row %s against %s: experiments %d/%d, native %v/%v, cache missing %v/%v",
				r.x, r.base, x.Allot, b.Allot, x.Module != nil, b.Module != nil, misses(x), misses(b))
		}
		if x.Cost == b.Cost || !(x.Cost && x.InterleavedOnly() || b.Cost && b.InterleavedOnly()) {
			t.Errorf("row %s against %s: cost %v/%v, want exactly one, measured interleaved only", r.x, r.base, x.Cost, b.Cost)
		}
	}
	for _, v := range variant.All() {
		if v.Returning && (!v.Sticky || v.Cold) {
			t.Errorf("%s: returning units need a sticky cookie made ahead: sticky %v, cold %v", v.ID, v.Sticky, v.Cold)
		}
		if v.Module == nil || !v.Sticky {
			continue
		}
		w := variantByID(t, v.WasmTwin)
		if !w.Sticky || w.Returning != v.Returning || w.Cold != v.Cold || w.Pool != v.Pool {
			t.Errorf("%s and its Wasm twin %q send different traffic", v.ID, v.WasmTwin)
		}
	}
}
