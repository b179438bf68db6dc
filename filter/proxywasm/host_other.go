//go:build !wasip1

package proxywasm

import (
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
)

// abiHost is the proxy-wasm host the adapter calls: any abi.Host (the
// fakes of native tests).
type abiHost = abi.Host

// newHost is NewHost, with the proxyWasm under it: over a fake that
// batches (fakehost.Batcher), a Host that batches too.
func newHost(h abi.Host) (plugin.Host, *proxyWasm) {
	w := &proxyWasm{h: h}
	if b, ok := h.(plugin.HeaderBatcher); ok {
		return &batching{proxyWasm: w, HeaderBatcher: b}, w
	}
	return w, w
}

// batching is a proxyWasm whose host batches its header writes too. Only
// fakes batch, so the Wasm build has no such type.
type batching struct {
	*proxyWasm
	plugin.HeaderBatcher
}
