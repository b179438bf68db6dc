package suite

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// hashExpect is GrowthBook's hash v1 of id with seed "bench", split 50/50:
// what the Lua and minimal Wasm filters must add.
func hashExpect(id string) (string, error) {
	n, _ := engine.Hash(benchSeed, id, 1)
	if n < 0.5 {
		return "control", nil
	}
	return "treatment", nil
}

// engineExpect returns the "bench" experiment's variation for id under the
// n-experiment configuration, computed natively by Allot's engine.
func engineExpect(n int) (func(id string) (string, error), error) {
	_, set, err := config.Parse(filterConfigJSON(n))
	if err != nil {
		return nil, fmt.Errorf("parse the filter config of %d experiments: %w", n, err)
	}
	return func(id string) (string, error) {
		attrs := engine.Attributes{"id": id, "country": "US", "platform": "ios", "version": "2.3.1"}
		for i, a := range set.Assign(nil, attrs) {
			if set.Keys()[i] == "bench" && a.InExperiment {
				return a.Value, nil
			}
		}
		return "", nil
	}, nil
}

// preflight sends one request per id and compares x-seen (the route's echo
// of x-experiment-bench) with what variant v must add, and the response's
// Set-Cookie with the one v must set (none but for new units with a sticky
// cookie); a returning unit's request carries its cookie.
func preflight(listener string, v variant, ids []string) error {
	for _, id := range ids {
		req, err := http.NewRequest("GET", "http://"+listener+"/", nil)
		if err != nil {
			return err
		}
		req.Header.Set("x-user-id", id)
		req.Header.Set(preflightHeader, "1")
		for _, h := range requestHeaders {
			req.Header.Set(h[0], h[1])
		}
		if v.cookie != nil {
			c, err := v.cookie(id)
			if err != nil {
				return err
			}
			req.Header.Set("cookie", c)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("pre-flight request: %w", err)
		}
		resp.Body.Close()
		want, err := v.expect(id)
		if err != nil {
			return err
		}
		seen, name := seenHeader, benchHeader
		if v.lean {
			seen, name = seenDictHeader, dictHeader
		}
		got := resp.Header.Get(seen)
		if got == "-" { // Envoy's formatter renders a missing header as "-"
			got = ""
		}
		if v.lean {
			got = dictMember(got, "bench")
		}
		if resp.StatusCode != 200 || got != want {
			return fmt.Errorf("pre-flight for x-user-id %q: status %d, %s %q, want %q", id, resp.StatusCode, name, resp.Header.Get(seen), want)
		}
		var wantSC []string
		if v.setCookie != nil {
			sc, err := v.setCookie(id)
			if err != nil {
				return err
			}
			wantSC = []string{sc}
		}
		if gotSC := resp.Header.Values("set-cookie"); !slices.Equal(gotSC, wantSC) {
			return fmt.Errorf("pre-flight for x-user-id %q: Set-Cookie %q, want %q", id, gotSC, wantSC)
		}
	}
	return nil
}

// dictMember returns the string value of member key of an RFC 9651
// dictionary as Allot writes it (key="value", ...), or "".
func dictMember(dict, key string) string {
	for _, m := range strings.Split(dict, ", ") {
		if v, ok := strings.CutPrefix(m, key+"="); ok {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
		}
	}
	return ""
}

// hostProfile is what Allot's plugin does per request, counted natively on
// the fake host: the calls it makes into Envoy and the headers it adds.
type hostProfile struct {
	Experiments  int
	Lean         bool
	HostCalls    map[string]float64 // per request, by proxy-wasm call
	TotalCalls   float64
	HeadersAdded float64
}

// profileAllot runs Allot's plugin on the fake host for n experiments over
// 200 requests with distinct ids and counts host calls per request.
func profileAllot(n int, lean bool) (hostProfile, error) {
	host := fakehost.New()
	counts := map[string]int{}
	host.Fail = func(call string) error { counts[call]++; return nil }
	p := proxywasm.New(host)
	cfg := filterConfigJSON(n)
	if lean {
		cfg = leanConfigJSON(n)
	}
	root, ok := host.StartPlugin(p, cfg)
	if !ok {
		return hostProfile{}, fmt.Errorf("fake host: configuration with %d experiments refused: %v", n, host.Logs)
	}
	clear(counts)
	const requests = 200
	added := 0
	for i := range requests {
		in := benchRequest("p-" + strconv.Itoa(i))
		out, err := host.Request(p, root, in)
		if err != nil {
			return hostProfile{}, err
		}
		added += len(out) - len(in)
	}
	hp := hostProfile{Experiments: n, Lean: lean, HostCalls: map[string]float64{}, HeadersAdded: float64(added) / requests}
	for k, v := range counts {
		hp.HostCalls[k] = float64(v) / requests
		hp.TotalCalls += float64(v) / requests
	}
	return hp, nil
}
