package main

import (
	"fmt"
	"testing"

	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/engine"
)

// TestVariationMatchesEngine pins the minimal filter's hash to Allot's
// engine (GrowthBook hash v1), so variants E, C and F add the same header
// value for the same id.
func TestVariationMatchesEngine(t *testing.T) {
	for i := range 2000 {
		id := fmt.Sprintf("user-%d", i)
		n, _ := engine.Hash(seed, id, 1)
		want := "treatment"
		if n < 0.5 {
			want = "control"
		}
		if got := Variation(id); got != want {
			t.Fatalf("Variation(%q) = %q, engine says %q", id, got, want)
		}
	}
}

func TestAddsHeader(t *testing.T) {
	host := fakehost.New()
	h := &handler{host: host}
	root, ok := host.StartPlugin(h, nil)
	if !ok {
		t.Fatal("configure refused")
	}
	out, err := host.Request(h, root, [][2]string{{":path", "/"}, {"x-user-id", "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	last := out[len(out)-1]
	if last[0] != header || last[1] != Variation("alice") {
		t.Fatalf("last header = %v, want %s: %s", last, header, Variation("alice"))
	}
}
