package variant

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

func variantByID(t *testing.T, id string) Variant {
	t.Helper()
	v, err := ByID(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
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
		if kv[0] == BenchHeader {
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
		{"V", 2 * WarmIDs, WarmIDs, 0},
		{"W", StickyPool + WarmIDs, 0, 0},
		{"X", 2 * WarmIDs, 0, 1},
	} {
		t.Run(c.id, func(t *testing.T) {
			v := variantByID(t, c.id)
			req, err := v.Request(7)
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
				if i == c.requests-WarmIDs {
					p.OnTick(root)
					hits = h.Counter(wire.MetricCacheHits)
				}
				id, got, sc := exchangeRaw(t, h, p, root, req, i)
				want, _ := v.Expect(id)
				if got != want || int64(len(sc)) != c.written {
					t.Fatalf("request %d (%s): %s %q and Set-Cookie %q, want %q and %d cookies", i, id, BenchHeader, got, sc, want, c.written)
				}
			}
			p.OnTick(root)
			if got := h.Counter(wire.MetricCacheHits) - hits; got != c.hits {
				t.Errorf("cache hits over the last %d requests: %d, want %d", WarmIDs, got, c.hits)
			}
			if n := h.Counter(wire.MetricStickyInvalid); n != 0 {
				t.Errorf("%d invalid cookies", n)
			}
		})
	}
}
