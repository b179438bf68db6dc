//go:build wasip1

package proxywasm

import (
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
)

// abiHost is the proxy-wasm host the adapter calls: in the Wasm build,
// Envoy's (abi.NewHost), held concretely.
type abiHost = abi.WasmHost

// newHost is NewHost, with the proxyWasm under it. It panics unless h is
// Envoy's host: in the Wasm module there is no other proxy-wasm host.
func newHost(h abi.Host) (plugin.Host, *proxyWasm) {
	w := &proxyWasm{h: h.(abi.WasmHost)}
	return w, w
}
