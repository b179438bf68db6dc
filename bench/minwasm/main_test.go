package main

import (
	"slices"
	"testing"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/bench/minimal"
	"github.com/allotmesh/allot/filter/abi/fakehost"
)

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
	if last[0] != minimal.Header || last[1] != minimal.Variation("alice") {
		t.Fatalf("last minimal.Header = %v, want %s: %s", last, minimal.Header, minimal.Variation("alice"))
	}
}

// TestReplaysScript: configured with a floor script, the filter makes the
// script's writes (floor.Apply) with the script's host calls — one
// proxy_set_header_map_pairs in rewrite mode, one add per minimal.Header otherwise —
// and no other header.
func TestReplaysScript(t *testing.T) {
	for _, sc := range []*floor.Script{
		{Rewrite: true, Headers: []floor.Write{{Name: "x-experiment-bench", Value: floor.Var}, {Name: "x-experiment-exp-0004", Value: "alt"},
			{Name: "x-experiments", Value: `bench="$v", exp-0004="alt"`}, {Name: "x-experiments-version", Value: "v1"}},
			Props: []floor.Write{{Name: "allot", Value: `bench="$v", exp-0004="alt"`}}},
		{Headers: []floor.Write{{Name: "x-experiments", Value: `bench="$v"`}, {Name: "x-experiments-version", Value: "v1"}}},
	} {
		host := fakehost.New()
		h := &handler{host: host}
		root, ok := host.StartPlugin(h, []byte(sc.String()))
		if !ok {
			t.Fatalf("script refused: %v", host.Logs)
		}
		for _, id := range []string{"alice", "bob", "carol"} {
			in := [][2]string{{":path", "/"}, {"x-user-id", id}}
			before := host.SetPairsCalls
			out, err := host.Request(h, root, in)
			if err != nil {
				t.Fatal(err)
			}
			want, props := floor.Apply(sc, in, minimal.Variation(id))
			if !slices.Equal(out, want) {
				t.Errorf("rewrite %v, %s: headers %q, want %q", sc.Rewrite, id, out, want)
			}
			if sets := host.SetPairsCalls - before; sets != map[bool]int{true: 1, false: 0}[sc.Rewrite] {
				t.Errorf("rewrite %v: %d proxy_set_header_map_pairs calls", sc.Rewrite, sets)
			}
			for k, v := range props {
				if got := string(host.Properties[k]); got != v {
					t.Errorf("property %s = %q, want %q", k, got, v)
				}
			}
		}
	}
}

func TestRefusesBadScript(t *testing.T) {
	host := fakehost.New()
	if _, ok := host.StartPlugin(&handler{host: host}, []byte(floor.Magic+"replace\n")); ok {
		t.Fatal("a script with an unknown mode was accepted")
	}
}
