// Command filter is the Allot proxy-wasm module. Build it with the standard
// Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o allot.wasm ./filter
//
// main only wires the ABI layer to the plugin and tunes the Go runtime; see
// filter/README.md.
package main

import (
	"runtime/debug"

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

func init() {
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
	abi.SetHandler(plugin.New(abi.NewHost()))
}

func main() {}
