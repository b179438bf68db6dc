//go:build cgo && !allotfault

package nativemod

import "github.com/allotmesh/allot/filter/plugin"

// wrapHost is the host a worker's plugin talks to: the Envoy host itself
// (the allotfault build wraps it to inject panics; fault.go).
func wrapHost(h *envoyHost) plugin.Host { return h }
