package suite

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

func variantByID(t *testing.T, id string) variant {
	t.Helper()
	i := slices.IndexFunc(variants(), func(v variant) bool { return v.ID == id })
	if i < 0 {
		t.Fatalf("no variant %s", id)
	}
	v, err := withExpect(variants()[i])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStickyRowsPairLikeWithLike: every row of the cost tables (the
// stickiness rows and the observe rows) sets a variant
// against a baseline on the same artifact, with the same experiments and
// the same state of the cache (a cold variant's or a pool larger than the
// cache both miss it); exactly one of the two is a cost variant, measured
// in the interleaved section only; and each native sticky variant has the
// traffic of its Wasm twin.
func TestStickyRowsPairLikeWithLike(t *testing.T) {
	misses := func(v variant) bool { return v.cold || v.units() > config.DefaultCacheSize }
	for _, r := range slices.Concat(stickyRows, observeRows) {
		x := variantByID(t, r.x)
		if !strings.Contains(r.what, "("+r.x) {
			t.Errorf("row %s: its text does not name it: %q", r.x, r.what)
		}
		if (x.module != nil) != (r.artifact == "native") {
			t.Errorf("row %s: artifact %s, module %v", r.x, r.artifact, x.module != nil)
		}
		if r.base == "" {
			continue
		}
		b := variantByID(t, r.base)
		if x.allot != 50 || b.allot != 50 || (x.module == nil) != (b.module == nil) || misses(x) != misses(b) || x.lean || b.lean ||
			x.observe && (b.observe || b.sticky || x.sticky) {
			t.Errorf("row %s against %s: experiments %d/%d, native %v/%v, cache missing %v/%v",
				r.x, r.base, x.allot, b.allot, x.module != nil, b.module != nil, misses(x), misses(b))
		}
		if x.cost == b.cost || !(x.cost && x.interleavedOnly() || b.cost && b.interleavedOnly()) {
			t.Errorf("row %s against %s: cost %v/%v, want exactly one, measured interleaved only", r.x, r.base, x.cost, b.cost)
		}
	}
	for _, v := range variants() {
		if v.returning && (!v.sticky || v.cold) {
			t.Errorf("%s: returning units need a sticky cookie made ahead: sticky %v, cold %v", v.ID, v.sticky, v.cold)
		}
		if v.module == nil || !v.sticky {
			continue
		}
		w := variantByID(t, v.wasmTwin)
		if !w.sticky || w.returning != v.returning || w.cold != v.cold || w.pool != v.pool {
			t.Errorf("%s and its Wasm twin %q send different traffic", v.ID, v.wasmTwin)
		}
	}
}

// exchangeRaw sends the load generator's request number i of v to Allot
// on the fake host and returns the unit's x-experiment-bench and the
// response's Set-Cookie values.
func exchangeRaw(t *testing.T, h *fakehost.Host, p *proxywasm.Handler, root uint32, req func([]byte, uint64) []byte, i uint64) (id, got string, setCookie []string) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(req(nil, i))))
	if err != nil {
		t.Fatal(err)
	}
	in := [][2]string{{":method", r.Method}, {":path", r.URL.Path}, {":authority", r.Host}}
	for name, vals := range r.Header {
		for _, v := range vals {
			in = append(in, [2]string{strings.ToLower(name), v})
		}
	}
	up, down, err := h.Exchange(p, root, in, [][2]string{{":status", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range up {
		if kv[0] == benchHeader {
			got = kv[1]
		}
	}
	for _, kv := range down {
		if kv[0] == wire.SetCookieHeader {
			setCookie = append(setCookie, kv[1])
		}
	}
	return r.Header.Get("x-user-id"), got, setCookie
}

// TestStickyTraffic runs the load generator's requests of the sticky
// variants through Allot on the fake host with their configuration, and
// checks that they are what the rows say: returning units' cookies are
// their own and valid (the engine's assignment, no new cookie), V's hit
// the cache once warm, W's miss it on every request even after a whole
// pass over its units, and X's new units each get a cookie.
func TestStickyTraffic(t *testing.T) {
	cfg, err := allotConfig(50, sticky)
	if err != nil {
		t.Fatal(err)
	}
	js, err := translate.ConfigJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id       string
		requests uint64
		// hits wanted over the last warmIDs requests, and cookies set
		// per request.
		hits, written int64
	}{
		{"V", 2 * warmIDs, warmIDs, 0},
		{"W", stickyPool + warmIDs, 0, 0},
		{"X", 2 * warmIDs, 0, 1},
	} {
		t.Run(c.id, func(t *testing.T) {
			v := variantByID(t, c.id)
			req, err := v.request(7)
			if err != nil {
				t.Fatal(err)
			}
			h := fakehost.New()
			p := proxywasm.New(h)
			root, ok := h.StartPlugin(p, js)
			if !ok {
				t.Fatalf("refused: %v", h.Logs)
			}
			var hits int64
			for i := range c.requests {
				if i == c.requests-warmIDs {
					p.OnTick(root)
					hits = h.Counter(wire.MetricCacheHits)
				}
				id, got, sc := exchangeRaw(t, h, p, root, req, i)
				want, _ := v.expect(id)
				if got != want || int64(len(sc)) != c.written {
					t.Fatalf("request %d (%s): %s %q and Set-Cookie %q, want %q and %d cookies", i, id, benchHeader, got, sc, want, c.written)
				}
			}
			p.OnTick(root)
			if got := h.Counter(wire.MetricCacheHits) - hits; got != c.hits {
				t.Errorf("cache hits over the last %d requests: %d, want %d", warmIDs, got, c.hits)
			}
			if n := h.Counter(wire.MetricStickyInvalid); n != 0 {
				t.Errorf("%d invalid cookies", n)
			}
		})
	}
}

// TestWasmExports reads a module's export names, past the sections before
// and after the export section, and refuses what is not a module.
func TestWasmExports(t *testing.T) {
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, 1, 4, 1, 0x60, 0, 0) // type section: one func type
	export := []byte{2, 3, 'a', 'b', 'c', 0, 0x80, 0x01, byte(len(responseExport))}
	export = append(append(export, responseExport...), 0, 5)
	mod = append(append(mod, 7, byte(len(export))), export...)
	mod = append(mod, 0, 3, 1, 'x', 9) // a custom section
	got, err := wasmExports(mod)
	if err != nil || !slices.Equal(got, []string{"abc", responseExport}) {
		t.Errorf("exports %q (%v), want abc and %s", got, err, responseExport)
	}
	if got, err := wasmExports(mod[:14]); err != nil || got != nil {
		t.Errorf("a module without exports: %q (%v)", got, err)
	}
	if _, err := wasmExports(mod[:len(mod)-8]); err == nil {
		t.Error("a truncated module read without error")
	}
	if _, err := wasmExports([]byte("\x7fELF")); err == nil {
		t.Error("an ELF file read as a module")
	}
}
