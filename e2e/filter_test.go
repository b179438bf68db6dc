//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// waitAssigned waits until a request for user through p carries header.
func waitAssigned(t *testing.T, p *proxy, user, header string) {
	t.Helper()
	harness.MustEventually(t, 10*time.Second, func() error {
		r, err := p.get(map[string][]string{"x-user-id": {user}})
		if err != nil {
			return err
		}
		if v := r.Header(header); len(v) != 1 {
			return fmt.Errorf("%s = %q, want one value", header, v)
		}
		return nil
	})
}

// TestFilterProduction covers the filter a mesh admin deploys: attributes
// from a header, a cookie and a query parameter driving conditions, the
// dictionary and version headers, Envoy stats matching the traffic, and the
// exposure access log.
func TestFilterProduction(t *testing.T) { forArtifacts(t, testFilterProduction) }

func testFilterProduction(t *testing.T, a artifact) {
	s := startSystemFor(t, a, "-mesh", repoPath(t, "envoy-configs/mesh.json"))
	p := s.startSidecar("sidecar-filter", "shop")
	on := map[string]any{"variations": []string{"off", "on"}, "weights": []float64{0, 1}}
	with := func(key string, cond map[string]any) map[string]any {
		e := map[string]any{"key": key, "condition": cond}
		for k, v := range on {
			e[k] = v
		}
		return e
	}
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", with("by-country", map[string]any{"country": "NL"}), nil)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", with("by-plan", map[string]any{"plan": "pro"}), nil)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", with("by-source", map[string]any{"utm_source": "mail"}), nil)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "split", "variations": []string{"control", "treatment"}, "weights": []float64{0.5, 0.5}}, nil)
	waitAssigned(t, p, "probe", "x-experiment-split")

	t.Run("header, cookie and query attributes drive conditions", func(t *testing.T) {
		r, err := p.getPath("/?a=1&utm_source=mail", map[string][]string{
			"x-user-id": {"u1"}, "x-country": {"NL"}, "cookie": {"theme=dark; plan=pro"},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"by-country", "by-plan", "by-source"} {
			if v := r.Header("x-experiment-" + key); len(v) != 1 || v[0] != "on" {
				t.Errorf("x-experiment-%s = %q, want [on]", key, v)
			}
		}
		r, err = p.getPath("/?utm_source=web", map[string][]string{
			"x-user-id": {"u1"}, "x-country": {"US"}, "cookie": {"plan=free"},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"by-country", "by-plan", "by-source"} {
			if v := r.Header("x-experiment-" + key); len(v) != 0 {
				t.Errorf("x-experiment-%s = %q for a request that does not match", key, v)
			}
		}
	})

	t.Run("dictionary header parses as RFC 9651 and matches the headers", func(t *testing.T) {
		r, err := p.getPath("/?utm_source=mail", map[string][]string{"x-user-id": {"u2"}, "x-country": {"NL"}})
		if err != nil {
			t.Fatal(err)
		}
		raw := r.Header("x-experiments")
		dict, err := httpsfv.UnmarshalDictionary(raw)
		if err != nil || len(raw) != 1 {
			t.Fatalf("x-experiments %q: %v", raw, err)
		}
		names := dict.Names()
		if strings.Join(names, ",") != "by-country,by-source,split" {
			t.Fatalf("dictionary keys %v, want by-country,by-source,split in order", names)
		}
		for _, name := range names {
			m, _ := dict.Get(name)
			v := m.(httpsfv.Item).Value
			if h := r.Header("x-experiment-" + name); len(h) != 1 || h[0] != v {
				t.Errorf("dictionary %s=%v but header %q", name, v, h)
			}
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || len(v[0]) != 16 {
			t.Errorf("x-experiments-version = %q, want the 16-hex-digit config version", v)
		}
	})

	t.Run("stats count cache hits, misses and every variation", func(t *testing.T) {
		before := p.settledStats(t)
		sent := map[string]int64{}
		for i := range 300 {
			r, err := p.get(map[string][]string{"x-user-id": {fmt.Sprintf("stats-user-%d", i%100)}})
			if err != nil {
				t.Fatal(err)
			}
			sent[r.Header("x-experiment-split")[0]]++
		}
		delta := func(after map[string]int64, name string) int64 { return after[name] - before[name] }
		harness.MustEventually(t, 5*time.Second, func() error {
			after := p.MustStats(t)
			got := map[string]int64{
				"hits":      delta(after, "wasmcustom."+wire.MetricCacheHits),
				"misses":    delta(after, "wasmcustom."+wire.MetricCacheMisses),
				"evaluated": delta(after, "wasmcustom."+wire.MetricEvaluated),
				"control":   delta(after, "wasmcustom."+wire.VariationMetric("split", 0)),
				"treatment": delta(after, "wasmcustom."+wire.VariationMetric("split", 1)),
			}
			want := map[string]int64{"hits": 200, "misses": 100, "evaluated": 300, "control": sent["control"], "treatment": sent["treatment"]}
			for k := range want {
				if got[k] != want[k] {
					return fmt.Errorf("stat deltas %v, want %v", got, want)
				}
			}
			return nil
		})
	})

	t.Run("the access log records the exposure", func(t *testing.T) {
		r, err := p.get(map[string][]string{"x-user-id": {"logged-user"}, "x-country": {"NL"}})
		if err != nil {
			t.Fatal(err)
		}
		dict := r.Header("x-experiments")[0]
		want := "unit=logged-user version=" + r.Header("x-experiments-version")[0] + " exposures=" + dict
		harness.MustEventually(t, 5*time.Second, func() error {
			b, err := os.ReadFile(p.AccessLog)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("access log has no line with %q:\n%s", want, b)
			}
			return nil
		})
	})
}

// TestEdgeGateway evaluates once at ingress and routes to two services: both
// see the same assignment for the same user.
func TestEdgeGateway(t *testing.T) { forArtifacts(t, testEdgeGateway) }

func testEdgeGateway(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	search := harness.MustStartEcho(t)
	_, checkoutPort, _ := splitHostPort(s.echoAddr)
	_, searchPort, _ := splitHostPort(search)
	g := startEnvoy(t, a.gateway, s.xdsPort, s.filter(), a.env(), "edge-1", "gateway", map[string]string{
		"port_value: 8081": "port_value: " + checkoutPort,
		"port_value: 8082": "port_value: " + searchPort,
	})
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "homepage", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}}, nil)
	for i := range 20 {
		user := fmt.Sprintf("edge-user-%d", i)
		var seen []string
		for _, path := range []string{"/checkout", "/search"} {
			var r harness.EchoResponse
			harness.MustEventually(t, 10*time.Second, func() error {
				var err error
				r, err = g.getPath(path, map[string][]string{"x-user-id": {user}, "x-experiment-homepage": {"forged"}})
				if err != nil {
					return err
				}
				if v := r.Header("x-experiment-homepage"); len(v) != 1 || v[0] == "forged" {
					return fmt.Errorf("%s: x-experiment-homepage = %q", path, v)
				}
				return nil
			})
			if r.Path != path {
				t.Fatalf("routed %s to an upstream that saw %s", path, r.Path)
			}
			seen = append(seen, r.Header("x-experiment-homepage")[0])
		}
		if seen[0] != seen[1] {
			t.Fatalf("%s: checkout saw %s, search saw %s", user, seen[0], seen[1])
		}
	}
}

// TestFilterMemoryFlat sends 200,000 requests with distinct user ids (every
// one a cache miss once the cache is full): Envoy's RSS must stay within 64
// MiB of its value after the first 10,000.
func TestFilterMemoryFlat(t *testing.T) { forArtifacts(t, testFilterMemoryFlat) }

func testFilterMemoryFlat(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	p := s.startSidecar("sidecar-mem", "mem")
	for _, key := range []string{"m1", "m2", "m3", "m4", "m5"} {
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
			"key": key, "variations": []string{"control", "treatment"}, "weights": []float64{0.5, 0.5}}, nil)
	}
	waitAssigned(t, p, "probe", "x-experiment-m5")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	var next, failures atomic.Int64
	send := func(upTo int64) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := next.Add(1)
					if n > upTo {
						return
					}
					req, _ := http.NewRequest("GET", p.URL+"/", nil)
					req.Header.Set("x-user-id", fmt.Sprintf("distinct-user-%08d", n))
					resp, err := client.Do(req)
					if err != nil {
						failures.Add(1)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || resp.Header.Get("content-type") != "application/json" {
						failures.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	// settled returns the stats once the VMs' counters have stopped
	// moving: two reads more than a flush period (1 s) apart agree. (A
	// worker VM may pass a few of the first requests through before its
	// configuration arrives, so the count sent is not the count evaluated.)
	settled := func() map[string]int64 {
		t.Helper()
		var stats map[string]int64
		last, since := int64(-1), time.Now()
		harness.MustEventually(t, 15*time.Second, func() error {
			stats = p.MustStats(t)
			got := stats["wasmcustom."+wire.MetricEvaluated]
			if got != last {
				last, since = got, time.Now()
			}
			if time.Since(since) < 1200*time.Millisecond {
				return fmt.Errorf("%s = %d, still moving", wire.MetricEvaluated, got)
			}
			return nil
		})
		return stats
	}
	// flushed waits until the counters include the n requests sent since
	// before (all of them evaluated: every VM is configured by then).
	flushed := func(before map[string]int64, n int64) map[string]int64 {
		t.Helper()
		var stats map[string]int64
		harness.MustEventually(t, 15*time.Second, func() error {
			stats = p.MustStats(t)
			if got := stats["wasmcustom."+wire.MetricEvaluated] - before["wasmcustom."+wire.MetricEvaluated]; got < n {
				return fmt.Errorf("%s grew by %d, want %d (fail_open %d, failed requests %d)", wire.MetricEvaluated, got, n, stats["wasmcustom."+wire.MetricFailOpen], failures.Load())
			}
			return nil
		})
		return stats
	}
	start := time.Now()
	send(10_000)
	base, before := p.MustRSS(t), settled()
	from := next.Load() // each sender stops after taking one number too many
	send(200_000)
	final, after := p.MustRSS(t), flushed(before, 200_000-from)
	allocs := after["wasmcustom."+wire.MetricVMAllocations] - before["wasmcustom."+wire.MetricVMAllocations]
	t.Logf("200,000 distinct users in %v: RSS %.1f MiB after 10k, %.1f MiB after 200k (+%.1f MiB); "+
		"Go heap allocations in the VMs during the last 190,000 requests: %d; VM memory %.1f MiB, %d collections in all",
		time.Since(start).Round(time.Second), mib(base), mib(final), mib(final-base), allocs,
		mib(after["wasmcustom."+wire.MetricVMMemory]), after["wasmcustom."+wire.MetricVMCollections])
	if failures.Load() > 0 {
		t.Errorf("%d requests failed", failures.Load())
	}
	if final-base > 64<<20 {
		t.Errorf("RSS grew by %.1f MiB, want at most 64 MiB", mib(final-base))
	}
	if a != wasmArtifact {
		return // the allot.vm.* figures below are the Wasm VMs'; the native module has none
	}
	// The request path allocates nothing (TestRequestPathAllocatesNothing
	// checks it natively); this checks the real module in Envoy, where a
	// host call's out-parameter once escaped to the heap on every request.
	// The bound leaves room for the ticks' own work.
	// Every VM runs a full collection after its configuration (filter/main.go),
	// inside the callback: in Envoy's V8 it completes and returns.
	if n := after["wasmcustom."+wire.MetricVMCollections]; n < 1 {
		t.Errorf("%s = %d, want at least one collection after configuration", wire.MetricVMCollections, n)
	}
	if _, ok := after["wasmcustom."+wire.MetricVMAllocations]; !ok {
		t.Errorf("no %s stat", wire.MetricVMAllocations)
	} else if allocs > 190 {
		t.Errorf("%d Go heap allocations during 190,000 requests, want at most 1 per 1,000 requests", allocs)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
