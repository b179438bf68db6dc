//go:build cgo

// Command native is the Allot filter as an Envoy dynamic module: the same
// plugin and engine as the Wasm module (../main.go), built with cgo as a
// shared object that Envoy 1.40 loads through its dynamic_modules HTTP
// filter:
//
//	CGO_ENABLED=1 go build -buildmode=c-shared -o liballot.so ./filter/native
//
// One Go runtime serves every Envoy worker thread. main only wires the ABI
// layer (filter/dynmod, whose //export hooks the shared object exports) to
// the module (filter/nativemod); see filter/README.md.
package main

import (
	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/nativemod"
)

func init() { dynmod.SetHandler(nativemod.New()) }

func main() {}
