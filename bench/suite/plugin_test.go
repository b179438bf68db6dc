package suite

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/plugin"
)

// BenchmarkPluginRequest runs Allot's plugin natively on the fake host, one
// request per iteration, to split the Wasm variants' cost: the fake host's
// calls are nearly free, so what remains is the plugin's own work (warm: a
// cache hit; cold: engine + cache insert + allocation).
//
//	go test -run '^$' -bench PluginRequest -benchmem ./bench/suite
func BenchmarkPluginRequest(b *testing.B) {
	for _, n := range []int{1, 50} {
		for _, cold := range []bool{false, true} {
			name := strconv.Itoa(n) + "/warm"
			if cold {
				name = strconv.Itoa(n) + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				host := fakehost.New()
				p := plugin.New(host)
				root, ok := host.StartPlugin(p, filterConfigJSON(n))
				if !ok {
					b.Fatalf("configuration refused: %v", host.Logs)
				}
				in := benchRequest("")
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					id := i % warmIDs
					if cold {
						id = i
					}
					in[3][1] = "user-" + strconv.Itoa(id)
					if _, err := host.Request(p, root, in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestProfileAllot(t *testing.T) {
	hp, err := profileAllot(1, false)
	if err != nil {
		t.Fatal(err)
	}
	// x-experiment-bench, x-experiments and x-experiments-version.
	if hp.HeadersAdded != 3 {
		t.Errorf("1 experiment: %.2f headers added per request, want 3", hp.HeadersAdded)
	}
	lean, err := profileAllot(50, true)
	if err != nil {
		t.Fatal(err)
	}
	// x-experiments and x-experiments-version, in at most three host calls.
	if lean.HeadersAdded != 2 || lean.TotalCalls > 3 {
		t.Errorf("50 experiments, lean: %.2f headers added and %.2f host calls per request, want 2 and ≤ 3", lean.HeadersAdded, lean.TotalCalls)
	}
}

func TestBootstrapsRender(t *testing.T) {
	p := &paths{allotWasm: "/x/allot.wasm", minWasm: "/x/min.wasm", authzPort: 1}
	for _, v := range variants() {
		f, err := v.filters(p)
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		if _, err := bootstrap(f, p.authzPort); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
	}
}

// TestFloorWritesReplayAllot: a floor script replays exactly what Allot
// writes for its unit — headers and exposure property, through the same
// host call — and G's floor rewrites the map while I's adds two headers.
func TestFloorWritesReplayAllot(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     []byte
		rewrite bool
		headers int // at least
		props   int
	}{
		{"G", filterConfigJSON(50), true, 10, 1},
		{"I", leanConfigJSON(50), false, 2, 0},
	} {
		sc, id, out, err := floorWrites(c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v, _ := hashExpect(id)
		got, props := floor.Apply(sc, benchRequest(id), v)
		if !slices.Equal(got, out) {
			t.Errorf("%s: replaying the script for %s gives %q, Allot wrote %q", c.name, id, got, out)
		}
		if sc.Rewrite != c.rewrite || len(sc.Headers) < c.headers || len(sc.Props) != c.props {
			t.Errorf("%s: script rewrite %v with %d headers and %d properties, want %v, ≥ %d, %d",
				c.name, sc.Rewrite, len(sc.Headers), len(sc.Props), c.rewrite, c.headers, c.props)
		}
		for k, want := range props {
			if want == "" || !strings.Contains(sc.String(), "bench=\""+floor.Var+"\"") {
				t.Errorf("%s: property %s %q does not carry the unit's variation", c.name, k, want)
			}
		}
	}
}
