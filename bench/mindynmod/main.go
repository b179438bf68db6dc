// Command mindynmod is benchmark variant N: variant E (bench/minwasm) as an
// Envoy dynamic module, the smallest useful Go filter on Envoy's native
// host. For each request it reads the request headers (two callbacks: their
// count, then the headers), hashes x-user-id with GrowthBook's hash v1
// (FNV-1a 32 of id+seed, modulo 1000) and adds x-experiment-bench: control
// or treatment (one callback). Nothing else. It is built exactly like
// Allot's native filter and over the same ABI layer (filter/dynmod):
//
//	CGO_ENABLED=1 go build -buildmode=c-shared -o libmindynmod.so ./bench/mindynmod
//
// Envoy loads it as the dynamic module "mindynmod" (see bench/README.md).
package main

import (
	"github.com/allotmesh/allot/bench/minimal"
	"sync"

	"github.com/allotmesh/allot/filter/dynmod"
)

func init() { dynmod.SetHandler(handler{}) }

func main() {}

// handler implements dynmod.Handler with the least possible work.
type handler struct{}

var _ dynmod.Handler = handler{}

// headers holds the header views of a request hook; a pool rather than one
// slice because workers call the hooks concurrently.
var headers = sync.Pool{New: func() any { return new(dynmod.Headers) }}

func (handler) ProgramInit(uint32)                                {}
func (handler) ConfigNew(dynmod.Config, string, []byte) uintptr   { return 1 }
func (handler) ConfigDestroy(uintptr)                             {}
func (handler) FilterNew(h uintptr, _ dynmod.Filter) uintptr      { return h }
func (handler) FilterDestroy(uintptr)                             {}
func (handler) RequestHeaders(f dynmod.Filter, _ uintptr, _ bool) { addVariation(f) }

// addVariation reads the unit id, hashes it and adds one header.
func addVariation(f dynmod.Filter) {
	hp := headers.Get().(*dynmod.Headers)
	defer headers.Put(hp)
	*hp = f.RequestHeaders(*hp)
	for i := range *hp {
		k, v := dynmod.HeaderAt(*hp, i)
		if k == minimal.UnitHeader && v != "" {
			f.AddRequestHeader(minimal.Header, minimal.Variation(v))
			return
		}
	}
}
