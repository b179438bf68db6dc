// Command filter is the Allot proxy-wasm module. Build it with the standard
// Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o allot.wasm ./filter
//
// main only wires the ABI layer to the plugin; see filter/README.md.
package main

import (
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
)

func init() { abi.SetHandler(plugin.New(abi.NewHost())) }

func main() {}
