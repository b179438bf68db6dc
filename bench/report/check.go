package report

import ()

// hostProfile is what Allot's plugin does per request, counted natively on
// the fake host: the calls it makes into Envoy and the headers it adds.
type HostProfile struct {
	Experiments  int
	Lean         bool
	HostCalls    map[string]float64 // per request, by proxy-wasm call
	TotalCalls   float64
	HeadersAdded float64
}
