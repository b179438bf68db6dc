// Command filter is the Allot proxy-wasm module. Build it with the standard
// Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o allot.wasm ./filter
//
// main only wires the ABI layer to the plugin and tunes the Go runtime; see
// filter/README.md.
package main

import (
	"runtime"
	_ "unsafe" // for go:linkname

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
)

// Runtime tuning for one worker VM. Wasm linear memory only grows, so the
// heap's high-water mark is the VM's memory for good: collect earlier than
// Go's default (GOGC 100) and hold the heap under a soft limit. The cache
// of assignments bounds live data, so an unbounded stream of distinct users
// keeps VM memory flat.
const (
	gcPercent   = 50
	memoryLimit = 48 << 20
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
	setGCPercent(gcPercent)
	setMemoryLimit(memoryLimit)
	p := plugin.New(abi.NewHost())
	p.ReadVMStats(readVMStats)
	abi.SetHandler(p)
}

// memStats is readVMStats' buffer (5 KB: on the stack it would escape to
// the heap once a tick).
var memStats runtime.MemStats

// readVMStats reads the runtime's figures once per tick. ReadMemStats
// stops the world, which in a single-threaded VM costs only its own work.
func readVMStats(s *plugin.VMStats) {
	m := &memStats
	runtime.ReadMemStats(m)
	*s = plugin.VMStats{MemoryBytes: m.Sys, HeapBytes: m.HeapAlloc, Allocations: m.Mallocs, Collections: uint64(m.NumGC)}
}

func main() {}
