//go:build !wasip1

package plugin

import "github.com/allotmesh/allot/filter/abi"

// abiHost is the proxy-wasm host the adapter calls: any abi.Host (the
// fakes of native tests).
type abiHost = abi.Host

func toABIHost(h abi.Host) abiHost { return h }
