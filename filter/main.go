// Command filter is the Allot proxy-wasm module. Build it with the standard
// Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o allot.wasm ./filter
//
// main only wires the ABI layer to the proxy-wasm adapter (filter/proxywasm,
// over the core filter/plugin) and tunes the Go runtime; see
// filter/README.md.
package main

import (
	"runtime"
	_ "unsafe" // for go:linkname

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// Runtime tuning for one worker VM. Wasm linear memory only grows, so the
// heap's high-water mark is the VM's memory for good: collect earlier than
// Go's default (GOGC 100) and hold the heap under a soft limit. The cache
// of assignments bounds live data, so an unbounded stream of distinct users
// keeps VM memory flat.
//
// And the runtime must never start a collection on the request path. Go's
// collector marks concurrently, in a background worker goroutine, but a VM
// that only runs while the host calls into it never schedules that worker:
// a cycle started by an allocation in a request callback stays in its mark
// phase, with a write barrier on every pointer write, until later
// allocations have done its marking for it — forever, on a request path
// that allocates nothing. (The cache's arena, allocated at the first miss,
// started one in every worker VM: a request with 50 experiments cost the
// module 1.5 to 3.2 times as much in V8, by make bench-vm, most of it in
// the barrier.)
// So automatic collection is off (GOGC=off) except while a configuration
// is decoded, and the VM collects where no request waits: a full
// collection, run to completion, after every proxy_on_configure, and on a
// tick once the heap has grown by gcPercent since the last one. The memory
// limit stays as the backstop.
const (
	gcPercent   = 50
	memoryLimit = 48 << 20
	// minBudget is the growth below which a tick never collects: Go's
	// minimum heap goal (4 MiB at GOGC 100) scaled like gcPercent.
	minBudget = 4 << 20 * gcPercent / 100
)

// setGCPercent and setMemoryLimit are the runtime's implementations of
// runtime/debug.SetGCPercent and SetMemoryLimit, which the runtime exports
// to runtime/debug by go:linkname. Importing runtime/debug itself would
// link fmt and os into the module (about 380 KB, some 6 MiB of Envoy RSS at
// --concurrency 2). Should a Go release rename them, the build fails; it
// cannot silently lose the tuning.
//
//go:linkname setGCPercent runtime/debug.setGCPercent
func setGCPercent(int32) int32

//go:linkname setMemoryLimit runtime/debug.setMemoryLimit
func setMemoryLimit(int64) int64

func init() {
	setGCPercent(-1)
	setMemoryLimit(memoryLimit)
	p := proxywasm.New(abi.NewHost())
	p.ReadVMStats(readVMStats)
	abi.SetHandler(&vm{Handler: p})
}

// vm is the proxy-wasm handler with the VM's collections placed off the request path.
type vm struct {
	*proxywasm.Handler
	gc collector
}

// OnConfigure implements abi.Handler: decoding a configuration allocates
// freely, so the runtime may start collections meanwhile; the full
// collection that follows finishes any still marking and frees the
// decoding's garbage before the first request.
func (v *vm) OnConfigure(rootID uint32, size int) bool {
	setGCPercent(gcPercent)
	ok := v.Handler.OnConfigure(rootID, size)
	v.gc.collect()
	setGCPercent(-1)
	return ok
}

// OnTick implements abi.Handler.
func (v *vm) OnTick(rootID uint32) {
	v.Handler.OnTick(rootID)
	v.gc.tick()
}

// collector decides when a tick collects.
type collector struct {
	stats runtime.MemStats
	// since is the total allocated at the last collection, budget the
	// growth after which the next tick collects.
	since, budget uint64
}

// collect runs a full collection to completion: runtime.GC blocks this
// callback while the scheduler runs the mark worker, which is the only way
// a VM's mark phase ends without allocation.
func (c *collector) collect() {
	runtime.GC()
	runtime.ReadMemStats(&c.stats)
	c.since = c.stats.TotalAlloc
	c.budget = max(minBudget, c.stats.HeapAlloc*gcPercent/100)
}

// tick collects once the heap has grown by the budget. A cycle the memory
// limit started finishes here too: reaching the limit takes far more
// growth than the budget.
func (c *collector) tick() {
	runtime.ReadMemStats(&c.stats)
	if c.stats.TotalAlloc-c.since >= c.budget {
		c.collect()
	}
}

// memStats is readVMStats' buffer (5 KB: on the stack it would escape to
// the heap once a tick).
var memStats runtime.MemStats

// readVMStats reads the runtime's figures once per tick. ReadMemStats
// stops the world, which in a single-threaded VM costs only its own work.
func readVMStats(s *proxywasm.VMStats) {
	m := &memStats
	runtime.ReadMemStats(m)
	*s = proxywasm.VMStats{MemoryBytes: m.Sys, HeapBytes: m.HeapAlloc, Allocations: m.Mallocs, Collections: uint64(m.NumGC)}
}

func main() {}
