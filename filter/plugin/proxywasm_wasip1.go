//go:build wasip1

package plugin

import "github.com/allotmesh/allot/filter/abi"

// abiHost is the proxy-wasm host the adapter calls: in the Wasm build,
// Envoy's (abi.NewHost), held concretely.
type abiHost = abi.WasmHost

// toABIHost panics unless h is Envoy's host: in the Wasm module there is
// no other proxy-wasm host.
func toABIHost(h abi.Host) abiHost { return h.(abi.WasmHost) }
