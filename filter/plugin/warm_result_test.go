package plugin_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// TestWarmResult: after a request the plugin assigned, WarmResult is its
// cache key, its exposure record and the positions of what it counted
// (evaluated, hits, its variation); after one that failed open, or left a
// sticky cookie, there is none.
func TestWarmResult(t *testing.T) {
	h, p, root := start(t, twoArm)
	p.Plugin().KeepWarmResults()
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
		t.Fatal(err)
	}
	key, items, seen, ok := p.Plugin().WarmResult()
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
	if key, items, seen, ok := p.Plugin().WarmResult(); !ok || !seen || string(key) != string(want) || !slices.Equal(items, []uint32{0<<16 | uint32(v)}) {
		t.Errorf("alice again: WarmResult = %q, %v, seen %v, %v; want %q, [%d], seen, true", key, items, seen, ok, want, v)
	}
	// The plan renders that item as Go added it, and counts it where Go does.
	cfg := p.Plugin().Config(root)
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

	if _, _, _, ok := p.Plugin().WarmResult(); ok {
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
	if _, _, _, ok := p.Plugin().WarmResult(); ok {
		t.Error("a request that failed open has a warm result")
	}

	h, p, root = start(t, stickyConfig("0.5,0.5", 0, 0))
	p.Plugin().KeepWarmResults()
	if _, err := h.Request(p, root, [][2]string{{"x-user-id", "bob"}}); err != nil {
		t.Fatal(err)
	}
	if p.Plugin().SetCookie() == "" {
		t.Fatal("no sticky cookie written: the case does not test what it says")
	}
	if _, _, _, ok := p.Plugin().WarmResult(); ok {
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
	if kept, _ := p.Plugin().WarmKept(); kept {
		t.Error("without KeepWarmResults the plugin kept a result")
	}
	if _, _, _, ok := p.Plugin().WarmResult(); ok {
		t.Error("without KeepWarmResults, WarmResult is ok")
	}
	p.Plugin().KeepWarmResults()
	request := func() {
		t.Helper()
		if _, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}}); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Plugin().WarmKept(); !ok {
			t.Fatal("an assigned request kept no result, want its result")
		}
	}
	request()
	if _, _, _, ok := p.Plugin().WarmResult(); !ok {
		t.Error("WarmResult not ok")
	} else if kept, _ := p.Plugin().WarmKept(); kept {
		t.Error("WarmResult left a result, want nothing")
	}
	request()
	p.Plugin().Install(root, p.Plugin().Config(root))
	if kept, _ := p.Plugin().WarmKept(); kept {
		t.Error("after Install the plugin kept a result")
	}
	request()
	p.OnDelete(root)
	if kept, _ := p.Plugin().WarmKept(); kept {
		t.Error("after OnDelete the plugin kept a result")
	}
}
