package proxywasm

import (
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
)

// VMStats are the Go runtime's figures for one Wasm VM.
type VMStats struct {
	// MemoryBytes is the memory the runtime has taken from the VM. Wasm
	// linear memory never shrinks, so this is what the VM costs Envoy.
	MemoryBytes uint64
	// HeapBytes is the size of the live and not yet collected heap objects.
	HeapBytes uint64
	// Allocations counts heap allocations since the VM started: the
	// request path makes none, so it should grow only on configuration.
	Allocations uint64
	// Collections counts completed garbage collections.
	Collections uint64
}

// vmMetrics reports VMStats as Envoy stats: the two gauges by their change
// since the last report, so that every VM's share adds up in the one stat
// they share, and the two counters by their increase.
type vmMetrics struct {
	read    func(*VMStats)
	ids     [4]uint32 // memory, heap, allocations, collections
	defined bool
	last    VMStats
	cur     VMStats // read's buffer: a local passed to a func value would escape to the heap
}

// ReadVMStats makes the handler report the VM's runtime figures, read by
// read on every tick, as the allot.vm.* stats. Without it (as in native
// tests) there are none.
func (h *Handler) ReadVMStats(read func(*VMStats)) { h.vm.read = read }

// define defines the VM metrics once per VM.
func (m *vmMetrics) define(h plugin.Host) {
	if m.read == nil || m.defined {
		return
	}
	for i, d := range [...]struct {
		t    plugin.MetricKind
		name string
	}{
		{plugin.Gauge, wire.MetricVMMemory}, {plugin.Gauge, wire.MetricVMHeap},
		{plugin.Counter, wire.MetricVMAllocations}, {plugin.Counter, wire.MetricVMCollections},
	} {
		id, err := h.DefineMetric(d.t, d.name)
		if err != nil {
			h.Log(wire.LogWarn, "allot: VM metrics unavailable: "+err.Error())
			return
		}
		m.ids[i] = id
	}
	m.defined = true
}

// flush reports the change since the last flush.
func (m *vmMetrics) flush(h plugin.Host) {
	if !m.defined {
		return
	}
	m.read(&m.cur)
	for i, d := range [...]int64{
		int64(m.cur.MemoryBytes - m.last.MemoryBytes), int64(m.cur.HeapBytes - m.last.HeapBytes),
		int64(m.cur.Allocations - m.last.Allocations), int64(m.cur.Collections - m.last.Collections),
	} {
		if d != 0 && (i < 2 || d > 0) {
			h.IncrementMetric(m.ids[i], d)
		}
	}
	m.last = m.cur
}

// withdraw takes the VM's share out of the gauges: its last plugin
// instance is gone, and the VM with it.
func (m *vmMetrics) withdraw(h plugin.Host) {
	if !m.defined {
		return
	}
	for i, v := range [...]uint64{m.last.MemoryBytes, m.last.HeapBytes} {
		if v != 0 {
			h.IncrementMetric(m.ids[i], -int64(v))
		}
	}
	m.last.MemoryBytes, m.last.HeapBytes = 0, 0
}
