package scenario

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// preflight sends one request per id and compares x-seen (the route's echo
// of x-experiment-bench) with what variant v must add, and the response's
// Set-Cookie with the one v must set (none but for new units with a sticky
// cookie); a returning unit's request carries its cookie.
func preflight(listener string, v variant.Variant, ids []string) error {
	if v.OFREP {
		return preflightOFREP(listener, v, ids)
	}
	for _, id := range ids {
		req, err := http.NewRequest("GET", "http://"+listener+"/", nil)
		if err != nil {
			return err
		}
		req.Header.Set("x-user-id", id)
		req.Header.Set(variant.PreflightHeader, "1")
		for _, h := range variant.RequestHeaders {
			req.Header.Set(h[0], h[1])
		}
		if v.Cookie != nil {
			c, err := v.Cookie(id)
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
		want, err := v.Expect(id)
		if err != nil {
			return err
		}
		seen, name := variant.SeenHeader, variant.BenchHeader
		if v.Lean {
			seen, name = variant.SeenDictHeader, variant.DictHeader
		}
		got := resp.Header.Get(seen)
		if got == "-" { // Envoy's formatter renders a missing header as "-"
			got = ""
		}
		if v.Lean {
			got = dictMember(got, "bench")
		}
		if resp.StatusCode != 200 || got != want {
			return fmt.Errorf("pre-flight for x-user-id %q: status %d, %s %q, want %q", id, resp.StatusCode, name, resp.Header.Get(seen), want)
		}
		var wantSC []string
		if v.SetCookie != nil {
			sc, err := v.SetCookie(id)
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

// preflightOFREP sends one bulk evaluation per id, as the load generator
// does, and checks the answer: status 200, JSON with one flag per
// experiment of the configuration, each with the variation the engine
// assigns the unit (reason DEFAULT where it is not in the experiment).
func preflightOFREP(listener string, v variant.Variant, ids []string) error {
	for _, id := range ids {
		resp, err := client.Post("http://"+listener+variant.OFREPBulkPath, "application/json",
			bytes.NewReader(variant.AppendOFREPBody(nil, id)))
		if err != nil {
			return fmt.Errorf("pre-flight request: %w", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("pre-flight answer: %w", err)
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("pre-flight bulk evaluation for %q: status %d: %.200s", id, resp.StatusCode, body)
		}
		if err := v.CheckBulk(id, body); err != nil {
			return fmt.Errorf("pre-flight bulk evaluation for %q: %w", id, err)
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

// profileAllot runs Allot's plugin on the fake host for n experiments over
// 200 requests with distinct ids and counts host calls per request.
func profileAllot(n int, lean bool) (report.HostProfile, error) {
	host := fakehost.New()
	counts := map[string]int{}
	host.Fail = func(call string) error { counts[call]++; return nil }
	p := proxywasm.New(host)
	cfg := variant.FilterConfigJSON(n)
	if lean {
		cfg = variant.LeanConfigJSON(n)
	}
	root, ok := host.StartPlugin(p, cfg)
	if !ok {
		return report.HostProfile{}, fmt.Errorf("fake host: configuration with %d experiments refused: %v", n, host.Logs)
	}
	clear(counts)
	const requests = 200
	added := 0
	for i := range requests {
		in := variant.BenchRequest("p-" + strconv.Itoa(i))
		out, err := host.Request(p, root, in)
		if err != nil {
			return report.HostProfile{}, err
		}
		added += len(out) - len(in)
	}
	hp := report.HostProfile{Experiments: n, Lean: lean, HostCalls: map[string]float64{}, HeadersAdded: float64(added) / requests}
	for k, v := range counts {
		hp.HostCalls[k] = float64(v) / requests
		hp.TotalCalls += float64(v) / requests
	}
	return hp, nil
}
