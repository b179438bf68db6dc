//go:build cgo && !allotfault

package main

import "github.com/allotmesh/allot/filter/abi"

// wrapHost is the host a worker's plugin talks to: the Envoy host itself
// (the allotfault build wraps it to inject panics; fault.go).
func wrapHost(h *envoyHost) abi.Host { return h }
