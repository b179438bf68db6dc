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
//
// Given a write script as its filter_config (bench/floor, in a
// google.protobuf.StringValue), it instead makes, after the same read and
// hash, the writes the script lists with the callbacks Allot's native module
// uses for them: every header in one batched call (dynmod.Filter.
// AddRequestHeaders, as Allot's native host adds them) and one filter-state
// write per property, under the key Allot gives it ("wasm." + path). That
// is variant U, the floor of Allot native's Q and R.
package main

import (
	"sync"
	"sync/atomic"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/bench/minimal"
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/wire"
)

func init() { dynmod.SetHandler(&handler{}) }

func main() {}

// handler implements dynmod.Handler with the least possible work.
type handler struct {
	mu sync.Mutex
	// scripts holds each configuration's script by handle/2 − 1 (nil: no
	// script); it only grows, and requests read it without a lock.
	scripts atomic.Pointer[[]*replay]
}

// replay is a floor.Replay with its filter-state keys made.
type replay struct {
	*floor.Replay
	keys []string
}

var _ dynmod.Handler = (*handler)(nil)

// scratch is a request's header views and value buffer; a pool rather than
// one because workers call the hooks concurrently.
type scratch struct {
	headers dynmod.Headers
	batch   dynmod.HeaderBatch
	buf     []byte
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func (*handler) ProgramInit(uint32)    {}
func (*handler) ConfigDestroy(uintptr) {}

// ConfigNew accepts any configuration; one that is a write script is
// compiled.
func (h *handler) ConfigNew(_ dynmod.Config, _ string, config []byte) uintptr {
	var r *replay
	if len(config) > 0 {
		sc, err := floor.Parse(string(config))
		if err != nil {
			dynmod.Log(wire.LogCritical, "mindynmod: "+err.Error())
			return 0
		}
		r = &replay{Replay: sc.Compile()}
		for _, p := range r.Props {
			r.keys = append(r.keys, "wasm."+p.Name)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var next []*replay
	if old := h.scripts.Load(); old != nil {
		next = append(next, *old...)
	}
	next = append(next, r)
	h.scripts.Store(&next)
	return uintptr(len(next))<<1 | dynmod.Stateless // no state per stream
}

// RequestHeaders reads the unit id, hashes it and adds one header, or
// makes the script's writes.
func (h *handler) RequestHeaders(f dynmod.Filter, _ dynmod.Stream, handle uintptr, _ bool) dynmod.HeadersStatus {
	s := scratches.Get().(*scratch)
	defer scratches.Put(s)
	s.headers = f.RequestHeaders(s.headers)
	for i := range s.headers {
		k, v := dynmod.HeaderAt(s.headers, i)
		if k != minimal.UnitHeader || v == "" {
			continue
		}
		r := (*h.scripts.Load())[handle>>1-1]
		if r == nil {
			f.AddRequestHeader(minimal.Header, minimal.Variation(v))
			return dynmod.HeadersContinue
		}
		variation := minimal.Variation(v)
		s.batch.Reset()
		for i := range r.Headers {
			s.buf = r.Headers[i].Append(s.buf[:0], variation)
			s.batch.Add(r.Headers[i].Name, abi.StringView(s.buf))
		}
		f.AddRequestHeaders(&s.batch)
		for i := range r.Props {
			s.buf = r.Props[i].Append(s.buf[:0], variation)
			f.SetFilterState(r.keys[i], s.buf)
		}
		return dynmod.HeadersContinue
	}
	return dynmod.HeadersContinue
}

// RequestBody implements dynmod.Handler: no stream awaits its body here.
func (*handler) RequestBody(dynmod.Filter, dynmod.Stream, uintptr, bool) dynmod.BodyStatus {
	return dynmod.BodyContinue
}
