package plugin

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// TestWarmPlan: a configuration whose attributes are all headers gets a
// plan listing each header's slot; any other source (node.* attributes
// among them: Go resolves them at Install, C would read them empty), a
// sticky cookie or a cache without a byte bound gets none; an observed
// experiment's plan names its outcome slots and the unrecorded counter;
// a counter missing from the metric names refuses the plan (C would
// otherwise count it at position 0, requests_evaluated).
func TestWarmPlan(t *testing.T) {
	const exps = `"experiments":[{"key":"e","variations":["a","b"],"weights":[0.5,0.5],"condition":{"c":"fr","n":{"$exists":false}}}]`
	// Slots are the referenced attributes in the engine's order: c, id, n
	// (n unmapped: empty).
	for _, tc := range []struct {
		name, attrs string
		extra       string
		want        []WarmHeader // nil: no plan
	}{
		{"headers", `{"name":"c","header":"x-country"}`, ``, []WarmHeader{{"x-country", 0}, {"x-user-id", 1}}},
		{"pseudo-header", `{"name":"c","property":"request.method"}`, ``, []WarmHeader{{":method", 0}, {"x-user-id", 1}}},
		{"unmapped attribute", `{"name":"c","header":"x-country"}`, ``, []WarmHeader{{"x-country", 0}, {"x-user-id", 1}}},
		{"node attribute", `{"name":"c","header":"x-country"},{"name":"n","property":"node.id"}`, ``, nil},
		{"cookie", `{"name":"c","cookie":"country"}`, ``, nil},
		{"query", `{"name":"c","query":"country"}`, ``, nil},
		{"url path", `{"name":"c","property":"request.url_path"}`, ``, nil},
		{"property", `{"name":"c","property":"source.address"}`, ``, nil},
		{"no byte bound", `{"name":"c","header":"x-country"}`, `"cacheMaxBytes":-1,`, nil},
		{"sticky cookie", `{"name":"c","header":"x-country"}`, `"stickyCookie":{"name":"sb","insecure":true,"keys":[{"id":"k","secret":"` + stickySecret + `"}]},`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(`{` + tc.extra + `"attributes":[` + tc.attrs + `],` + exps + `}`))
			if err != nil {
				t.Fatal(err)
			}
			w, err := cfg.WarmPlan()
			if (err == nil) != (tc.want != nil) {
				t.Fatalf("plan error %v, want a plan: %v", err, tc.want != nil)
			}
			if err != nil {
				return
			}
			slices.SortFunc(w.Headers, func(a, b WarmHeader) int { return a.Slot - b.Slot })
			if w.Slots != len(cfg.attrs) || !slices.Equal(w.Headers, tc.want) || w.Prefix != "x-experiment-" ||
				w.MaxEntries != cfg.CacheSize || w.MaxBytes != cfg.CacheMaxBytes {
				t.Errorf("plan %+v, want headers %v over %d slots", w, tc.want, len(cfg.attrs))
			}
		})
	}
	cfg, err := ParseConfig([]byte(`{"experiments":[{"key":"e","variations":["a","b"],"weights":[0.5,0.5],"observe":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	w, err := cfg.WarmPlan()
	names := cfg.MetricNames()
	if err != nil || w.Experiments[0].FirstSlot != 0 || !w.HasUnrecorded || names[w.Unrecorded] != wire.MetricOutcomesUnrecorded {
		t.Errorf("an observed experiment's plan: %v %+v", err, w)
	}
	for _, drop := range []string{wire.MetricEvaluated, wire.MetricCacheHits, wire.MetricOutcomesUnrecorded, wire.VariationMetric("e", 1)} {
		fewer := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == drop })
		if len(fewer) == len(names) {
			t.Fatalf("%s is not among %q: the case tests nothing", drop, names)
		}
		if _, err := cfg.warmPlan(fewer); err == nil || !strings.Contains(err.Error(), drop) {
			t.Errorf("without counter %s: plan error %v, want one naming it", drop, err)
		}
	}
}

// TestWarmResult: after a request the plugin assigned, WarmResult is its
// cache key, its exposure record and the positions of what it counted
// (evaluated, hits, its variation); after one that failed open, or left a
// sticky cookie, there is none.
func TestWarmResult(t *testing.T) {
	h, p, root := start(t, twoArm)
	p.KeepWarmResults()
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	key, items, seen, ok := p.WarmResult()
	want := binary.AppendUvarint(nil, uint64(len("alice")))
	want = append(want, "alice"...)
	v := slices.Index([]string{"control", "treatment"}, expected(t, twoArm, "alice")["checkout"])
	if !ok || seen || string(key) != string(want) || !slices.Equal(items, []uint32{0<<16 | uint32(v)}) {
		t.Errorf("WarmResult = %q, %v, seen %v, %v; want %q, [%d], a new unit, true", key, items, seen, ok, want, v)
	}
	// alice again: the same result, from the plugin's own cache.
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	if key, items, seen, ok := p.WarmResult(); !ok || !seen || string(key) != string(want) || !slices.Equal(items, []uint32{0<<16 | uint32(v)}) {
		t.Errorf("alice again: WarmResult = %q, %v, seen %v, %v; want %q, [%d], seen, true", key, items, seen, ok, want, v)
	}
	// The plan renders that item as Go added it, and counts it where Go does.
	cfg := p.roots[root].cfg
	plan, err := cfg.WarmPlan()
	if err != nil {
		t.Fatal(err)
	}
	names := cfg.MetricNames()
	x := plan.Experiments[0]
	if x.Header != "x-experiment-checkout" || x.Values[v] != []string{"control", "treatment"}[v] ||
		x.Members[v] != `, checkout="`+x.Values[v]+`"` || names[x.Stats[v]] != wire.VariationMetric("checkout", v) ||
		names[plan.Evaluated] != wire.MetricEvaluated || names[plan.Hits] != wire.MetricCacheHits ||
		x.FirstSlot != -1 || plan.HasUnrecorded || !plan.PerExperiment || !plan.Exposure || plan.Version != "v1" || plan.VersionHeader != "x-experiments-version" {
		t.Errorf("plan %+v", plan)
	}

	if _, _, _, ok := p.WarmResult(); ok {
		t.Error("a result taken twice")
	}

	h.Fail = func(call string) error {
		if call == "proxy_add_header_map_value" {
			return errors.New("injected")
		}
		return nil
	}
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := p.WarmResult(); ok {
		t.Error("a request that failed open has a warm result")
	}

	h, p, root = start(t, stickyConfig("0.5,0.5", 0, 0))
	p.KeepWarmResults()
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "bob"}}); err != nil {
		t.Fatal(err)
	}
	if p.SetCookie() == "" {
		t.Fatal("no sticky cookie written: the case does not test what it says")
	}
	if _, _, _, ok := p.WarmResult(); ok {
		t.Error("a request that left a sticky cookie has a warm result")
	}
}

// TestWarmResultKeepsNothing: a plugin whose host did not ask for warm
// results (the Wasm module, the native module with its warm path off)
// keeps none; one that asked holds nothing of a request once its result
// is taken, nor of a root once it is deleted or configured again.
func TestWarmResultKeepsNothing(t *testing.T) {
	h, p, root := start(t, twoArm)
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	if p.warm != (warmResult{}) {
		t.Errorf("without KeepWarmResults the plugin kept %+v", p.warm)
	}
	if _, _, _, ok := p.WarmResult(); ok {
		t.Error("without KeepWarmResults, WarmResult is ok")
	}
	p.KeepWarmResults()
	request := func() {
		t.Helper()
		if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
			t.Fatal(err)
		}
		if !p.warm.ok || p.warm.r == nil {
			t.Fatalf("an assigned request kept %+v, want its result", p.warm)
		}
	}
	request()
	if _, _, _, ok := p.WarmResult(); !ok || p.warm != (warmResult{}) {
		t.Errorf("WarmResult ok %v and left %+v, want ok and nothing", ok, p.warm)
	}
	request()
	p.Install(root, p.roots[root].cfg)
	if p.warm != (warmResult{}) {
		t.Errorf("after Install the plugin kept %+v", p.warm)
	}
	request()
	p.OnDelete(root)
	if p.warm != (warmResult{}) {
		t.Errorf("after OnDelete the plugin kept %+v", p.warm)
	}
}
