package plugin_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

// targeted maps attributes from every kind of source and targets on them.
const targeted = `{
  "version": "v7",
  "attributes": [
    {"name": "country", "header": "x-country"},
    {"name": "plan", "cookie": "plan"},
    {"name": "ref", "query": "ref"},
    {"name": "path", "property": "request.url_path"},
    {"name": "method", "property": "request.method"},
    {"name": "addr", "property": "source.address"},
    {"name": "zone", "property": "node.metadata.zone"}
  ],
  "experiments": [
    {"key": "by-country", "variations": ["a", "b"], "weights": [0, 1], "condition": {"country": "NL"}},
    {"key": "by-plan", "variations": ["a", "b"], "weights": [0, 1], "condition": {"plan": "pro"}},
    {"key": "by-ref", "variations": ["a", "b"], "weights": [0, 1], "condition": {"ref": "mail box"}},
    {"key": "by-path", "variations": ["a", "b"], "weights": [0, 1], "condition": {"path": "/shop"}},
    {"key": "by-method", "variations": ["a", "b"], "weights": [0, 1], "condition": {"method": "POST"}},
    {"key": "by-addr", "variations": ["a", "b"], "weights": [0, 1], "condition": {"addr": {"$regex": "^10\\."}}},
    {"key": "by-zone", "variations": ["a", "b"], "weights": [0, 1], "condition": {"zone": "eu-1"}},
    {"key": "unicode", "variations": ["Zoë \"quoted\"", "plain"], "weights": [1, 0]}
  ]
}`

func startTargeted(t *testing.T, config string) (*fakehost.Host, *proxywasm.Handler, uint32) {
	t.Helper()
	h := fakehost.New()
	h.Properties[abi.JoinPath([]string{"source", "address"})] = []byte("10.1.2.3:5555")
	h.Properties[abi.JoinPath([]string{"node", "metadata", "zone"})] = []byte("eu-1")
	p := proxywasm.New(h)
	root, ok := h.StartPlugin(p, []byte(config))
	if !ok {
		t.Fatalf("configuration refused: %v", h.Logs)
	}
	return h, p, root
}

func TestAttributesFromEverySource(t *testing.T) {
	h, p, root := startTargeted(t, targeted)
	got, err := h.Request(p, root, [][2]string{
		{":method", "POST"}, {":path", "/shop?x=1&ref=mail+box#top"},
		{"x-user-id", "u1"}, {"x-country", "NL"}, {"cookie", "a=1; plan=\"pro\"; b=2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"by-country", "by-plan", "by-ref", "by-path", "by-method", "by-addr", "by-zone"} {
		if v := values(got, "x-experiment-"+key); len(v) != 1 || v[0] != "b" {
			t.Errorf("x-experiment-%s = %q, want [b]", key, v)
		}
	}
	// Without the attributes, the conditions fail.
	got, _ = h.Request(p, root, [][2]string{{":method", "GET"}, {":path", "/other"}, {"x-user-id", "u1"}})
	for _, key := range []string{"by-country", "by-plan", "by-ref", "by-path", "by-method"} {
		if v := values(got, "x-experiment-"+key); len(v) != 0 {
			t.Errorf("x-experiment-%s = %q without its attribute", key, v)
		}
	}
}

func TestDictionaryAndVersionHeaders(t *testing.T) {
	h, p, root := startTargeted(t, targeted)
	got, _ := h.Request(p, root, [][2]string{{"x-user-id", "u1"}, {"x-country", "NL"}, {":method", "GET"}, {":path", "/"}})
	dict := values(got, "x-experiments")
	if len(dict) != 1 {
		t.Fatalf("x-experiments = %q, want one header", dict)
	}
	parsed, err := httpsfv.UnmarshalDictionary([]string{dict[0]})
	if err != nil {
		t.Fatalf("x-experiments %q is not an RFC 9651 dictionary: %v", dict[0], err)
	}
	want := map[string]string{"by-addr": "b", "by-country": "b", "by-zone": "b", "unicode": "Zoë \"quoted\""}
	if names := parsed.Names(); !reflect.DeepEqual(names, []string{"by-addr", "by-country", "by-zone", "unicode"}) {
		t.Fatalf("dictionary keys %v, want sorted %v", names, want)
	}
	for k, w := range want {
		m, _ := parsed.Get(k)
		item := m.(httpsfv.Item)
		var val string
		switch v := item.Value.(type) {
		case string:
			val = v
		case httpsfv.DisplayString:
			val = string(v)
		default:
			t.Fatalf("%s: value %T", k, item.Value)
		}
		if val != w {
			t.Errorf("%s = %q, want %q", k, val, w)
		}
		if hv := values(got, "x-experiment-"+k); len(hv) != 1 || hv[0] != w {
			t.Errorf("x-experiment-%s = %q, want [%q]", k, hv, w)
		}
	}
	if v := values(got, "x-experiments-version"); len(v) != 1 || v[0] != "v7" {
		t.Fatalf("x-experiments-version = %q, want [v7]", v)
	}
	if exp := string(h.Properties[wire.ExposureProperty]); exp != dict[0] {
		t.Fatalf("exposure filter state = %q, want the dictionary %q", exp, dict[0])
	}
}

func TestStripsEveryOwnedHeader(t *testing.T) {
	h, p, root := startTargeted(t, targeted)
	got, _ := h.Request(p, root, [][2]string{
		{"x-user-id", "u1"},
		{"X-Experiments", "by-country=\"a\""}, {"x-experiments", "x=\"y\""},
		{"X-EXPERIMENTS-VERSION", "forged"}, {"x-Experiment-By-Country", "a"}, {"x-experiment-nope", "1"},
	})
	if v := values(got, "x-experiments-version"); len(v) != 1 || v[0] != "v7" {
		t.Fatalf("version header = %q", v)
	}
	if v := values(got, "x-experiment-nope"); len(v) != 0 {
		t.Fatalf("forged header survived: %q", v)
	}
	for _, kv := range got {
		if strings.Contains(kv[1], "forged") || kv[1] == `x="y"` {
			t.Fatalf("forged value survived: %q", got)
		}
	}
}

// TestCacheEquivalence sends the same mixed traffic through a cached and an
// uncached plugin: every request's headers must be identical.
func TestCacheEquivalence(t *testing.T) {
	uncachedCfg := strings.Replace(targeted, `"version": "v7",`, `"version": "v7", "cacheSize": -1,`, 1)
	hc, pc, rc := startTargeted(t, targeted)
	hu, pu, ru := startTargeted(t, uncachedCfg)
	for i := range 500 {
		req := [][2]string{
			{":method", []string{"GET", "POST"}[i%2]}, {":path", fmt.Sprintf("/shop?ref=%d", i%3)},
			{"x-user-id", fmt.Sprintf("u%d", i%37)}, {"x-country", []string{"NL", "US", ""}[i%3]},
			{"cookie", fmt.Sprintf("plan=%s", []string{"pro", "free"}[i%2])},
		}
		a, _ := hc.Request(pc, rc, req)
		b, _ := hu.Request(pu, ru, req)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("request %d: cached %q != uncached %q", i, a, b)
		}
	}
	pc.OnTick(rc)
	pu.OnTick(ru)
	if hits := hc.Counter(wire.MetricCacheHits); hits == 0 || hits+hc.Counter(wire.MetricCacheMisses) != 500 {
		t.Fatalf("cached plugin: %d hits, %d misses", hits, hc.Counter(wire.MetricCacheMisses))
	}
	if hu.Counter(wire.MetricCacheHits) != 0 || hu.Counter(wire.MetricCacheMisses) != 500 {
		t.Fatalf("uncached plugin counted hits: %d", hu.Counter(wire.MetricCacheHits))
	}
}

func TestCacheKeyedOnReferencedAttributesOnly(t *testing.T) {
	h, p, root := start(t, twoArm)
	for i := range 10 {
		h.Request(p, root, [][2]string{{"x-user-id", "same"}, {"x-request-id", fmt.Sprint(i)}, {"x-other", fmt.Sprint(i)}})
	}
	p.OnTick(root)
	if hits, misses := h.Counter(wire.MetricCacheHits), h.Counter(wire.MetricCacheMisses); hits != 9 || misses != 1 {
		t.Fatalf("hits %d misses %d: unreferenced headers must not affect the cache key", hits, misses)
	}
}

func TestNewConfigurationStartsWithEmptyCache(t *testing.T) {
	h, p, root := start(t, twoArm)
	h.Request(p, root, [][2]string{{"x-user-id", "u"}})
	h.Configure(p, root, []byte(strings.Replace(twoArm, "0.5,0.5", "0,1", 1)))
	got, _ := h.Request(p, root, [][2]string{{"x-user-id", "u"}})
	if v := values(got, "x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
		t.Fatalf("after reconfiguration got %q from a stale cache", v)
	}
}

func TestVariationCountersMatchHeaders(t *testing.T) {
	h, p, root := start(t, twoArm)
	want := map[string]int64{}
	for i := range 300 {
		got, _ := h.Request(p, root, [][2]string{{"x-user-id", fmt.Sprintf("user-%d", i%120)}})
		want[values(got, "x-experiment-checkout")[0]]++
	}
	if h.Counter(wire.VariationMetric("checkout", 0)) != 0 {
		t.Fatal("counters were flushed before the tick")
	}
	p.OnTick(root)
	if got := h.Counter(wire.VariationMetric("checkout", 0)); got != want["control"] {
		t.Errorf("control counter %d, headers %d", got, want["control"])
	}
	if got := h.Counter(wire.VariationMetric("checkout", 1)); got != want["treatment"] {
		t.Errorf("treatment counter %d, headers %d", got, want["treatment"])
	}
	if got := h.Counter(wire.MetricEvaluated); got != 300 {
		t.Errorf("evaluated = %d, want 300", got)
	}
	if h.TickMs != plugin.TickMillis {
		t.Errorf("tick period %d, want %d", h.TickMs, plugin.TickMillis)
	}
}

// TestFailedWriteStillRemovesForgedHeaders: whether the changes are made
// one call each (a few) or in one rebuild of the map (many), a failed
// write leaves the request with neither forged nor partial assignments.
func TestFailedWriteStillRemovesForgedHeaders(t *testing.T) {
	for _, c := range []struct {
		name, failCall string
		start          func(t *testing.T) (*fakehost.Host, *proxywasm.Handler, uint32)
	}{
		{"single calls", "proxy_add_header_map_value", func(t *testing.T) (*fakehost.Host, *proxywasm.Handler, uint32) {
			return startTargeted(t, targeted)
		}},
		{"rebuild", "proxy_set_header_map_pairs", func(t *testing.T) (*fakehost.Host, *proxywasm.Handler, uint32) {
			return start(t, experimentsEveryUnitIsIn(plugin.MaxSingleWrites))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, p, root := c.start(t)
			h.Fail = func(call string) error {
				if call == c.failCall {
					return fmt.Errorf("injected")
				}
				return nil
			}
			got, err := h.Request(p, root, [][2]string{{"x-user-id", "u1"}, {"x-country", "NL"}, {"x-experiment-by-country", "forged"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range got {
				if strings.HasPrefix(kv[0], "x-experiment") {
					t.Fatalf("after a failed write the request still carries %q", kv)
				}
			}
			p.OnTick(root)
			if h.Counter(wire.MetricFailOpen) != 1 {
				t.Fatalf("fail_open = %d, want 1", h.Counter(wire.MetricFailOpen))
			}
		})
	}
}

// experimentsEveryUnitIsIn is a configuration of n two-variation
// experiments without conditions, e00, e01, …: every unit is in all of
// them.
func experimentsEveryUnitIsIn(n int) string {
	var exps []string
	for i := range n {
		exps = append(exps, fmt.Sprintf(`{"key":"e%02d","variations":["a","b"]}`, i))
	}
	return `{"version":"v","experiments":[` + strings.Join(exps, ",") + `]}`
}

func TestRejectsBadAttributes(t *testing.T) {
	for name, cfg := range map[string]string{
		"two sources": `{"attributes":[{"name":"a","header":"x-a","cookie":"a"}]}`,
		"no source":   `{"attributes":[{"name":"a"}]}`,
		"no name":     `{"attributes":[{"header":"x-a"}]}`,
		"twice":       `{"attributes":[{"name":"a","header":"x-a"},{"name":"a","cookie":"a"}]}`,
		"bad header":  `{"attributes":[{"name":"a","header":"X A"}]}`,
		"dict in pfx": `{"headerPrefix":"x-ab-","dictionaryHeader":"x-ab-all"}`,
		"bad cache":   `{"cacheSize":"big"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := plugin.ParseConfig([]byte(cfg)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestManyChangesRebuildOnce: a request adding more headers than
// maxSingleWrites (here 50 experiments) gets them all in one host call,
// after its forged header was removed with one call of its own.
func TestManyChangesRebuildOnce(t *testing.T) {
	h, p, root := start(t, experimentsEveryUnitIsIn(50))
	adds, removes := 0, 0
	h.Fail = func(call string) error {
		switch call {
		case "proxy_add_header_map_value":
			adds++
		case "proxy_remove_header_map_value":
			removes++
		}
		return nil
	}
	for i := range 100 {
		got, _ := h.Request(p, root, [][2]string{{"x-user-id", fmt.Sprintf("u%d", i)}, {"x-experiment-e01", "forged"}})
		if n := len(values(got, "x-experiments")); n != 1 {
			t.Fatalf("request %d: %d dictionary headers", i, n)
		}
		if v := values(got, "x-experiment-e01"); len(v) != 1 || v[0] == "forged" {
			t.Fatalf("request %d: x-experiment-e01 = %q", i, v)
		}
	}
	if h.SetPairsCalls != 100 || adds != 0 || removes != 100 {
		t.Fatalf("100 requests made %d header-map writes, %d adds and %d removals, want 100, 0 and 100", h.SetPairsCalls, adds, removes)
	}
}

// TestFewChangesUseSingleCalls: the two writes are counted apart. Up to
// maxSingleWrites forged names are removed one call each (one per name,
// whatever its casing or copies) and more with one rebuild of the map;
// up to maxSingleWrites headers are added one call each and more with one
// rebuild. A request without forged headers makes no call for them.
func TestFewChangesUseSingleCalls(t *testing.T) {
	forged := func(n int) [][2]string {
		var out [][2]string
		for i := range n {
			out = append(out, [2]string{fmt.Sprintf("X-Experiment-Forged-%02d", i), "forged"}, [2]string{fmt.Sprintf("x-experiment-forged-%02d", i), "again"})
		}
		return out
	}
	tests := []struct {
		name                   string
		experiments, forged    int
		removes, adds, rebuild int
	}{
		{"no forged headers", plugin.MaxSingleWrites - 2, 0, 0, plugin.MaxSingleWrites, 0},
		{"forged and added at the limit", plugin.MaxSingleWrites - 2, plugin.MaxSingleWrites, plugin.MaxSingleWrites, plugin.MaxSingleWrites, 0},
		{"one forged name too many", plugin.MaxSingleWrites - 2, plugin.MaxSingleWrites + 1, 0, plugin.MaxSingleWrites, 1},
		{"one header too many", plugin.MaxSingleWrites - 1, 1, 1, 0, 1},
		{"both too many", plugin.MaxSingleWrites - 1, plugin.MaxSingleWrites + 1, 0, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p, root := start(t, experimentsEveryUnitIsIn(tt.experiments))
			calls := map[string]int{}
			h.Fail = func(call string) error { calls[call]++; return nil }
			got, _ := h.Request(p, root, append([][2]string{{"x-user-id", "u"}}, forged(tt.forged)...))
			if calls["proxy_get_header_map_pairs"] != 1 || calls["proxy_remove_header_map_value"] != tt.removes ||
				calls["proxy_add_header_map_value"] != tt.adds || calls["proxy_set_header_map_pairs"] != tt.rebuild {
				t.Fatalf("host calls %v, want one read, %d removals, %d adds, %d rebuilds", calls, tt.removes, tt.adds, tt.rebuild)
			}
			for _, kv := range got {
				if strings.Contains(kv[1], "forged") || kv[1] == "again" {
					t.Fatalf("forged header survived: %q", kv)
				}
			}
			if n := len(ownedHeaders(got)); n != tt.experiments+2 {
				t.Fatalf("%d assignment headers, want %d: %q", n, tt.experiments+2, got)
			}
		})
	}
}

func TestExposureStateCanBeDisabled(t *testing.T) {
	h, p, root := start(t, strings.Replace(twoArm, `"version":"v1",`, `"version":"v1","disableExposureState":true,`, 1))
	h.Request(p, root, [][2]string{{"x-user-id", "u"}})
	if _, ok := h.Properties[wire.ExposureProperty]; ok {
		t.Fatal("exposure recorded although disabled")
	}
}

// TestSmallChangesUseSingleAdds: a request in one experiment gets its few
// headers with single adds (cheaper than rebuilding Envoy's map), and a
// failed add takes back what was added.
func TestSmallChangesUseSingleAdds(t *testing.T) {
	h, p, root := start(t, twoArm)
	got, _ := h.Request(p, root, [][2]string{{"x-user-id", "u"}})
	if h.SetPairsCalls != 0 || len(values(got, "x-experiment-checkout")) != 1 || len(values(got, "x-experiments")) != 1 {
		t.Fatalf("set-pairs calls %d, headers %q", h.SetPairsCalls, got)
	}
	adds := 0
	h.Fail = func(call string) error {
		if call == "proxy_add_header_map_value" {
			if adds++; adds == 3 {
				return fmt.Errorf("injected")
			}
		}
		return nil
	}
	got, err := h.Request(p, root, [][2]string{{"x-user-id", "u"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range got {
		if strings.HasPrefix(kv[0], "x-experiment") {
			t.Fatalf("after a failed add the request still carries %q", kv)
		}
	}
}

// TestBatchingHostAddsInOneCall: over a host that batches (the native
// module's), the plugin adds every header of a request with one call,
// however many (no map rebuild beyond maxSingleWrites), and the request
// ends up with exactly the headers, in the order, it gets over a host that
// does not. A batch Envoy refuses part-way fails open: nothing owned is
// left, the forged header included, and the failure is counted.
func TestBatchingHostAddsInOneCall(t *testing.T) {
	cfg := experimentsEveryUnitIsIn(50)
	plain, pp, proot := start(t, cfg)
	b := fakehost.NewBatcher()
	bp := proxywasm.New(b)
	broot, ok := b.StartPlugin(bp, []byte(cfg))
	if !ok {
		t.Fatalf("configuration refused: %v", b.Logs)
	}
	for i := range 100 {
		in := [][2]string{{"x-user-id", fmt.Sprintf("u%d", i)}, {"x-experiment-e01", "forged"}}
		want, _ := plain.Request(pp, proot, in)
		got, err := b.Request(bp, broot, in)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("request %d: batched\n%q\nunbatched\n%q", i, got, want)
		}
		if v := values(got, "x-experiment-e01"); len(v) != 1 || v[0] == "forged" {
			t.Fatalf("request %d: x-experiment-e01 = %q, want the assignment alone", i, v)
		}
	}
	if b.Batches != 100 || b.SetPairsCalls != 0 {
		t.Fatalf("100 requests made %d batches and %d map rebuilds, want 100 and 0", b.Batches, b.SetPairsCalls)
	}

	b.Inject(fakehost.Fault{Call: "batch_add_header", Nth: 3})
	got, err := b.Request(bp, broot, [][2]string{{"x-user-id", "u1"}, {"x-experiment-e01", "forged"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Fired != 1 {
		t.Fatalf("the fault fired %d times, want 1", b.Fired)
	}
	if owned := ownedHeaders(got); len(owned) != 0 {
		t.Fatalf("after a refused batch the request carries %q", owned)
	}
	if bp.Plugin().FailOpen(broot) != 1 {
		t.Fatalf("FailOpen = %d, want 1", bp.Plugin().FailOpen(broot))
	}
}
