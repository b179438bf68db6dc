package proxywasm

import (
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/wire"
)

// The adapter's own bookkeeping: stream contexts and their roots, and the
// VM's figures. Everything the plugin does through it is tested in
// filter/plugin, through this adapter.

const twoArm = `{"version":"v1","experiments":[{"key":"checkout","variations":["control","treatment"],"weights":[0.5,0.5]}]}`

// values returns every value of header name (case-insensitive).
func values(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// TestStreamsKeepTheirRoot: a stream is served under the root it was
// created under, and nothing of a stream or a deleted root is left.
func TestStreamsKeepTheirRoot(t *testing.T) {
	h := fakehost.New()
	p := New(h)
	oldRoot, _ := h.StartPlugin(p, []byte(`{"experiments":[{"key":"k","variations":["old","x"],"weights":[1,0]}]}`))
	newRoot, _ := h.StartPlugin(p, []byte(`{"experiments":[{"key":"k","variations":["new","x"],"weights":[1,0]}]}`))
	for root, want := range map[uint32]string{oldRoot: "old", newRoot: "new"} {
		got, _ := h.Request(p, root, [][2]string{{"x-user-id", "u"}})
		if v := values(got, "x-experiment-k"); len(v) != 1 || v[0] != want {
			t.Fatalf("root %d: got %q, want [%s]", root, v, want)
		}
	}
	p.OnDelete(oldRoot)
	if p.p.Root(oldRoot) != nil {
		t.Fatal("deleted root still tracked")
	}
	if len(p.streams) != 0 {
		t.Fatalf("streams leaked: %d", len(p.streams))
	}
}

// TestManyOpenStreamsKeepTheirRoot opens more streams than the slot table
// holds, under two roots, before any of them sends headers; each must be
// evaluated under its own root and none may be left tracked.
func TestManyOpenStreamsKeepTheirRoot(t *testing.T) {
	h := fakehost.New()
	p := New(h)
	roots := map[uint32]string{}
	for _, v := range []string{"one", "two"} {
		root, ok := h.StartPlugin(p, []byte(`{"version":"`+v+`","experiments":[{"key":"k","variations":["`+v+`","x"],"weights":[1,0]}]}`))
		if !ok {
			t.Fatal(h.Logs)
		}
		roots[root] = v
	}
	rootIDs := make([]uint32, 0, 2)
	for r := range roots {
		rootIDs = append(rootIDs, r)
	}
	type stream struct{ id, root uint32 }
	var open []stream
	for i := range 3 * len(p.slots) {
		// Ids with gaps, as when other filters' contexts interleave.
		id := uint32(1000 + i*3)
		if i%7 == 0 {
			id = uint32(1000 + i*3 + len(p.slots)) // collides with a later slot
		}
		r := rootIDs[i%2]
		p.OnContextCreate(id, r)
		open = append(open, stream{id, r})
	}
	for _, s := range open {
		h.Headers[abi.RequestHeaders] = [][2]string{{"x-user-id", "u"}}
		p.OnRequestHeaders(s.id, 1, true)
		if v := values(h.Headers[abi.RequestHeaders], "x-experiment-k"); len(v) != 1 || v[0] != roots[s.root] {
			t.Fatalf("stream %d of root %d: got %q, want [%s]", s.id, s.root, v, roots[s.root])
		}
		p.OnDelete(s.id)
	}
	for i, s := range p.slots {
		if s.id != 0 {
			t.Fatalf("slot %d still holds stream %d", i, s.id)
		}
	}
	if len(p.streams) != 0 {
		t.Fatalf("%d streams leaked", len(p.streams))
	}
}

// TestVMMetrics checks the allot.vm.* stats: gauges move by the VM's
// change since the last tick, counters by the increase, and a VM whose
// last root goes takes its share out of the gauges, so that the stats two
// VMs share add up.
func TestVMMetrics(t *testing.T) {
	h := fakehost.New()
	vms := [2]*Handler{New(h), New(h)}
	figures := [2]VMStats{
		{MemoryBytes: 10 << 20, HeapBytes: 3 << 20, Allocations: 1000, Collections: 4},
		{MemoryBytes: 12 << 20, HeapBytes: 5 << 20, Allocations: 2000, Collections: 6},
	}
	roots := [2]uint32{}
	for i, p := range vms {
		p.ReadVMStats(func(s *VMStats) { *s = figures[i] })
		root, ok := h.StartPlugin(p, []byte(twoArm))
		if !ok {
			t.Fatalf("configuration refused: %v", h.Logs)
		}
		roots[i] = root
		p.OnTick(root)
	}
	want := func(step string, memory, heap, allocs, gcs int64) {
		t.Helper()
		for name, w := range map[string]int64{wire.MetricVMMemory: memory, wire.MetricVMHeap: heap, wire.MetricVMAllocations: allocs, wire.MetricVMCollections: gcs} {
			if got := h.Counter(name); got != w {
				t.Errorf("%s: %s = %d, want %d", step, name, got, w)
			}
		}
	}
	want("first tick", 22<<20, 8<<20, 3000, 10)

	figures[0] = VMStats{MemoryBytes: 11 << 20, HeapBytes: 1 << 20, Allocations: 1500, Collections: 5}
	vms[0].OnTick(roots[0])
	want("second tick", 23<<20, 6<<20, 3500, 11)

	vms[0].OnTick(roots[0]) // nothing changed
	want("unchanged tick", 23<<20, 6<<20, 3500, 11)

	vms[0].OnDelete(roots[0])
	want("VM 0 gone", 12<<20, 5<<20, 3500, 11)
}
