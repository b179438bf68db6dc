package variant

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/nativemod"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// BenchmarkPluginRequest runs Allot's plugin natively on the fake host, one
// request per iteration, to split the Wasm variants' cost: the fake host's
// calls are nearly free, so what remains is the plugin's own work (warm: a
// cache hit; cold: engine + cache insert + allocation).
//
//	go test -run '^$' -bench PluginRequest -benchmem ./bench/variant
func BenchmarkPluginRequest(b *testing.B) {
	for _, n := range []int{1, 50} {
		for _, cold := range []bool{false, true} {
			name := strconv.Itoa(n) + "/warm"
			if cold {
				name = strconv.Itoa(n) + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				host := fakehost.New()
				p := proxywasm.New(host)
				root, ok := host.StartPlugin(p, FilterConfigJSON(n))
				if !ok {
					b.Fatalf("configuration refused: %v", host.Logs)
				}
				in := BenchRequest("")
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					id := i % WarmIDs
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

func TestBootstrapsRender(t *testing.T) {
	p := &Paths{AllotWasm: "/x/allot.wasm", MinWasm: "/x/min.wasm", AuthzPort: 1}
	for _, v := range All() {
		f, err := v.Filters(p)
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		if _, err := bootstrap(f, p.AuthzPort, 0); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
	}
}

// TestFloorWritesReplayAllot: a floor script replays exactly what Allot
// writes for its unit — headers and exposure property, through the same
// host calls: G's floor and I's add their headers one call each, and a unit
// in 60 experiments gets them in one rewrite of the map.
func TestFloorWritesReplayAllot(t *testing.T) {
	exps := []string{`{"key":"bench","variations":["control","treatment"],"weights":[0.5,0.5],"hashVersion":1}`}
	for i := 1; i < 60; i++ {
		exps = append(exps, fmt.Sprintf(`{"key":"e%02d","variations":["a","b"]}`, i))
	}
	sixty := []byte(`{"version":"sixty","experiments":[` + strings.Join(exps, ",") + `]}`)
	for _, c := range []struct {
		name    string
		cfg     []byte
		rewrite bool
		headers int // at least
		props   int
	}{
		{"G", FilterConfigJSON(50), false, 10, 1},
		{"I", LeanConfigJSON(50), false, 2, 0},
		{"60 experiments", sixty, true, 62, 1},
	} {
		sc, id, out, err := FloorWrites(c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v, _ := HashExpect(id)
		got, props := floor.Apply(sc, BenchRequest(id), v)
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

// TestNativeWritesMirrorFloor: the native variant makes K's writes — every
// header of G's floor script with the same value (the unit's variation a
// constant) and its exposure property as a string filter state — with
// Envoy's own filters, and is measured in the interleaved section only.
func TestNativeWritesMirrorFloor(t *testing.T) {
	var m Variant
	for _, v := range All() {
		if v.ID == "M" {
			m = v
		}
	}
	if m.nativeOf != "K" || !m.InterleavedOnly() {
		t.Fatalf("variant M: nativeOf %q, interleaved only %v; want K, true", m.nativeOf, m.InterleavedOnly())
	}
	sc, _, _, err := FloorWrites(FilterConfigJSON(50))
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Filters(&Paths{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Name        string `json:"name"`
		TypedConfig struct {
			Mutations struct {
				Request []struct {
					Append struct {
						Header struct{ Key, Value string } `json:"header"`
					} `json:"append"`
				} `json:"request_mutations"`
			} `json:"mutations"`
			States []struct {
				Key     string `json:"object_key"`
				Factory string `json:"factory_key"`
				Format  struct {
					Text struct {
						Inline string `json:"inline_string"`
					} `json:"text_format_source"`
				} `json:"format_string"`
			} `json:"on_request_headers"`
		} `json:"typed_config"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "envoy.filters.http.header_mutation" || got[1].Name != "envoy.filters.http.set_filter_state" {
		t.Fatalf("native filters: %s", raw)
	}
	subst := func(s string) string { return strings.Replace(s, floor.Var, nativeVariation, 1) }
	var headers [][2]string
	for _, m := range got[0].TypedConfig.Mutations.Request {
		headers = append(headers, [2]string{m.Append.Header.Key, m.Append.Header.Value})
	}
	var want [][2]string
	for _, h := range sc.Headers {
		want = append(want, [2]string{h.Name, subst(h.Value)})
	}
	if len(want) < 10 || !slices.Equal(headers, want) {
		t.Errorf("native headers %q, want the floor script's %q", headers, want)
	}
	states := got[1].TypedConfig.States
	if len(sc.Props) != 1 || len(states) != 1 || states[0].Key != sc.Props[0].Name || states[0].Factory != "envoy.string" ||
		states[0].Format.Text.Inline != subst(sc.Props[0].Value) || !strings.Contains(states[0].Format.Text.Inline, `bench="`+nativeVariation+`"`) {
		t.Errorf("native filter state %+v, want the floor script's property %+v", states, sc.Props)
	}
}

// TestWidenedHeaderMutation: variant b, B widened, is M's header_mutation
// alone — the headers of U's (and K's) write script, with the constant
// variation — without the filter state: the floor of Q's header writes.
func TestWidenedHeaderMutation(t *testing.T) {
	byID := map[string]Variant{}
	for _, v := range All() {
		byID[v.ID] = v
	}
	b, m := byID["b"], byID["M"]
	if !b.InterleavedOnly() || b.Module != nil {
		t.Fatalf("variant b: interleaved only %v, module %v; want true, none", b.InterleavedOnly(), b.Module != nil)
	}
	if got, _ := b.Expect("user-1"); got != nativeVariation {
		t.Errorf("variant b expects %q, want %q", got, nativeVariation)
	}
	fb, err := b.Filters(&Paths{})
	if err != nil {
		t.Fatal(err)
	}
	fm, err := m.Filters(&Paths{})
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := json.Marshal(fb)
	jm, _ := json.Marshal(fm[:1])
	if len(fb) != 1 || string(jb) != string(jm) {
		t.Errorf("variant b's filters %s, want M's header_mutation alone %s", jb, jm)
	}
	if n := strings.Count(string(jb), `"append_action"`); n < 10 {
		t.Errorf("variant b adds %d headers, want Q's (about 17)", n)
	}
}

// TestWarmSwitch: every variant loading Allot's native module sets the
// warm path's switch explicitly — off (0) for q–t only — and no other
// variant sets it.
func TestWarmSwitch(t *testing.T) {
	p := NewPaths("/repo")
	off := ""
	for _, v := range All() {
		var got []string
		for _, kv := range ModuleEnv(v, p) {
			if val, ok := strings.CutPrefix(kv, nativemod.WarmEnv+"="); ok {
				got = append(got, val)
			}
		}
		native := v.Module != nil && v.Module(p) == p.AllotSO
		switch {
		case native && len(got) == 1 && got[0] == "0":
			off += v.ID
		case native && (len(got) != 1 || got[0] != "1"):
			t.Errorf("variant %s (Allot native) sets %s to %q, want exactly one value", v.ID, nativemod.WarmEnv, got)
		case !native && len(got) > 0:
			t.Errorf("variant %s sets %s to %q without Allot's module", v.ID, nativemod.WarmEnv, got)
		}
	}
	if off != "qrst" {
		t.Errorf("the warm path is off for %q, want qrst", off)
	}
	for _, on := range "PQRSTUvwxzp" {
		if strings.ContainsRune(off, on) {
			t.Errorf("variant %c runs with the warm path off", on)
		}
	}
}

// TestProxiedBootstrap: the proxied variants' routes, the pre-flight's
// included, go to the upstream cluster on the given port; the others
// answer directly.
func TestProxiedBootstrap(t *testing.T) {
	b, err := bootstrap(nil, 0, 4242)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "direct_response") || strings.Count(s, `"cluster": "`+upstreamCluster+`"`) != 2 ||
		!strings.Contains(s, `"port_value": 4242`) {
		t.Errorf("proxied bootstrap: both routes to cluster %q on port 4242, no direct_response:\n%s", upstreamCluster, s)
	}
	b, err = bootstrap(nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Count(s, "direct_response") != 2 || strings.Contains(s, upstreamCluster) {
		t.Errorf("direct bootstrap:\n%s", s)
	}
	var proxied string
	for _, v := range All() {
		if v.Upstream {
			proxied += v.ID
		}
	}
	if proxied != "ap" {
		t.Errorf("proxied variants %q, want ap", proxied)
	}
}

// TestOFREPBootstrap: a bootstrap with the buffer filter (variant e)
// routes OFREP's paths, first, to a cluster that can never connect, with
// the buffer filter on for that route alone; one without has neither.
func TestOFREPBootstrap(t *testing.T) {
	f, err := wasmOFREP(&Paths{AllotWasm: "/x/allot.wasm"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootstrap(f, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"prefix": "/ofrep/"`, `"cluster": "` + ofrepNone + `"`, `"path": "/dev/null/allot-ofrep"`, `"disabled": true`, "BufferPerRoute"} {
		if !strings.Contains(s, want) {
			t.Errorf("the OFREP bootstrap lacks %s:\n%s", want, s)
		}
	}
	if i, j := strings.Index(s, `"/ofrep/"`), strings.Index(s, `"prefix": "/"`); i < 0 || j < i {
		t.Errorf("the /ofrep/ route is not first")
	}
	if b, err = bootstrap(nil, 0, 0); err != nil || strings.Contains(string(b), ofrepNone) || strings.Contains(string(b), "/ofrep/") {
		t.Errorf("a bootstrap without the buffer filter routes OFREP (%v):\n%s", err, b)
	}
}
