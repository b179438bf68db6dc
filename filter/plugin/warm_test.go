package plugin

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// TestWarmPlan: a configuration whose attributes are all headers or
// constant gets a plan listing each header's slot; any other source, a
// sticky cookie or a cache without a byte bound gets none; an observed
// experiment's plan names its outcome slots and the unrecorded counter.
func TestWarmPlan(t *testing.T) {
	const exps = `"experiments":[{"key":"e","variations":["a","b"],"weights":[0.5,0.5],"condition":{"c":"fr","n":{"$exists":false}}}]`
	// Slots are the referenced attributes in the engine's order: c, id, n
	// (n unmapped or node.id: empty).
	for _, tc := range []struct {
		name, attrs string
		extra       string
		want        []WarmHeader // nil: no plan
	}{
		{"headers", `{"name":"c","header":"x-country"}`, ``, []WarmHeader{{"x-country", 0}, {"x-user-id", 1}}},
		{"pseudo-header", `{"name":"c","property":"request.method"}`, ``, []WarmHeader{{":method", 0}, {"x-user-id", 1}}},
		{"node attribute", `{"name":"c","header":"x-country"},{"name":"n","property":"node.id"}`, ``, []WarmHeader{{"x-country", 0}, {"x-user-id", 1}}},
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
			w, ok := cfg.WarmPlan()
			if ok != (tc.want != nil) {
				t.Fatalf("plan %v, want one: %v", ok, tc.want != nil)
			}
			if !ok {
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
	w, ok := cfg.WarmPlan()
	names := cfg.MetricNames()
	if !ok || w.Experiments[0].FirstSlot != 0 || !w.HasUnrecorded || names[w.Unrecorded] != MetricOutcomesUnrecorded {
		t.Errorf("an observed experiment's plan: %v %+v", ok, w)
	}
}

// TestWarmResult: after a request the plugin assigned, WarmResult is its
// cache key, its exposure record and the positions of what it counted
// (evaluated, hits, its variation); after one that failed open, or left a
// sticky cookie, there is none.
func TestWarmResult(t *testing.T) {
	h, p, root := start(t, twoArm)
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	key, items, ok := p.WarmResult()
	want := binary.AppendUvarint(nil, uint64(len("alice")))
	want = append(want, "alice"...)
	v := slices.Index([]string{"control", "treatment"}, expected(t, twoArm, "alice")["checkout"])
	if !ok || string(key) != string(want) || !slices.Equal(items, []uint32{0<<16 | uint32(v)}) {
		t.Errorf("WarmResult = %q, %v, %v; want %q, [%d], true", key, items, ok, want, v)
	}
	// The plan renders that item as Go added it, and counts it where Go does.
	cfg := p.roots[root].cfg
	plan, _ := cfg.WarmPlan()
	names := cfg.MetricNames()
	x := plan.Experiments[0]
	if x.Header != "x-experiment-checkout" || x.Values[v] != []string{"control", "treatment"}[v] ||
		x.Members[v] != `, checkout="`+x.Values[v]+`"` || names[x.Stats[v]] != VariationMetric("checkout", v) ||
		names[plan.Evaluated] != MetricEvaluated || names[plan.Hits] != MetricCacheHits ||
		x.FirstSlot != -1 || plan.HasUnrecorded || !plan.PerExperiment || !plan.Exposure || plan.Version != "v1" || plan.VersionHeader != "x-experiments-version" {
		t.Errorf("plan %+v", plan)
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
	if _, _, ok := p.WarmResult(); ok {
		t.Error("a request that failed open has a warm result")
	}

	h, p, root = start(t, stickyConfig("0.5,0.5", 0, 0))
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "bob"}}); err != nil {
		t.Fatal(err)
	}
	if p.SetCookie() == "" {
		t.Fatal("no sticky cookie written: the case does not test what it says")
	}
	if _, _, ok := p.WarmResult(); ok {
		t.Error("a request that left a sticky cookie has a warm result")
	}
}
