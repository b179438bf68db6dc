package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// init reaches the runtime's GC settings without importing runtime/debug,
// and leaves automatic collection off.
func TestInitTunesTheRuntime(t *testing.T) {
	if got := gcPercentNow(); got != -1 {
		t.Errorf("GC percent after init = %d, want -1 (off)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != memoryLimit {
		t.Errorf("memory limit after init = %d, want %d", got, memoryLimit)
	}
}

// gcPercentNow reads the GC percent without changing it.
func gcPercentNow() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

func collections() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}

// percentHost records the GC percent in force while the plugin reads its
// configuration.
type percentHost struct {
	*fakehost.Host
	during int
}

func (h *percentHost) GetBuffer(t abi.BufferType, start, max int) ([]byte, error) {
	h.during = gcPercentNow()
	return h.Host.GetBuffer(t, start, max)
}

// Every configuration, accepted or refused, is decoded with collection on
// at gcPercent and followed by a full collection, after which automatic
// collection is off again: no cycle can start on the request path.
func TestConfigureCollectsAndLeavesCollectionOff(t *testing.T) {
	for _, c := range []struct {
		name   string
		config string
		ok     bool
	}{
		{"accepted", `{"experiments":[{"key":"k","variations":["a","b"]}]}`, true},
		{"refused", `{"experiments":[{"key":"k","variations":["a","b"],"weights":[0.9,0.9]}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &percentHost{Host: fakehost.New(), during: -2}
			v := &vm{Handler: proxywasm.New(h)}
			before := collections()
			if _, ok := h.StartPlugin(v, []byte(c.config)); ok != c.ok {
				t.Fatalf("on_configure = %v, want %v", ok, c.ok)
			}
			if got := collections(); got <= before {
				t.Errorf("collections %d → %d across on_configure, want at least one", before, got)
			}
			if h.during != gcPercent {
				t.Errorf("GC percent while decoding = %d, want %d", h.during, gcPercent)
			}
			if got := gcPercentNow(); got != -1 {
				t.Errorf("GC percent after on_configure = %d, want -1 (off)", got)
			}
		})
	}
}

// sink keeps the test's allocations reachable.
var sink []byte

// A tick collects once the heap has grown by the budget since the last
// collection, and not before.
func TestTickCollectsOnceTheHeapGrew(t *testing.T) {
	h := fakehost.New()
	v := &vm{Handler: proxywasm.New(h)}
	root, ok := h.StartPlugin(v, []byte(`{"experiments":[{"key":"k","variations":["a","b"]}]}`))
	if !ok {
		t.Fatal("configuration refused")
	}
	if v.gc.budget != minBudget {
		t.Fatalf("budget after configure with a small heap = %d, want the minimum %d", v.gc.budget, minBudget)
	}
	before := collections()
	v.OnTick(root)
	sink = make([]byte, v.gc.budget/2)
	v.OnTick(root)
	if got := collections(); got != before {
		t.Fatalf("collections %d → %d after ticks with half the budget allocated, want none", before, got)
	}
	sink = make([]byte, v.gc.budget/2)
	v.OnTick(root)
	if got := collections(); got != before+1 {
		t.Fatalf("collections %d → %d after the budget was allocated, want one", before, got)
	}
	v.OnTick(root)
	if got := collections(); got != before+1 {
		t.Errorf("collections %d → %d on the next tick, want no more", before+1, got)
	}
}

// The budget grows with the live heap: gcPercent of it.
func TestBudgetFollowsTheLiveHeap(t *testing.T) {
	sink = make([]byte, 16<<20)
	defer func() { sink = nil }()
	var c collector
	c.collect()
	if want := uint64(16<<20) * gcPercent / 100; c.budget < want || c.budget > want+want/4 {
		t.Errorf("budget with 16 MiB live = %d, want about %d", c.budget, want)
	}
}
