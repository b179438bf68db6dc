package plugin

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// stickySecret is a sticky cookie key (as sticky_test.go's).
var stickySecret = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32)))

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
