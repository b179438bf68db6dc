// Command minwasm is benchmark variant E: the smallest useful standard-Go
// proxy-wasm filter. For each request it reads the request headers (one host
// call), hashes x-user-id with GrowthBook's hash v1 (FNV-1a 32 of id+seed,
// modulo 1000) and adds x-experiment-bench: control or treatment (one host
// call). Nothing else: no cache, no metrics, no header stripping. It is the
// floor for a Go filter on Envoy's Wasm host, built exactly like Allot's
// filter and over the same ABI layer (filter/abi):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o minwasm.wasm ./bench/minwasm
//
// Given a write script as its plugin configuration (bench/floor), it
// instead makes, after the same read and hash, exactly the writes the script
// lists, with the same host calls: the benchmark's floor variants replay the
// writes Allot makes for a typical unit, so that what Envoy charges for
// those writes is measured apart from Allot's own work.
package main

import (
	"github.com/allotmesh/allot/bench/minimal"
	"strings"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/wire"
)

func init() { abi.SetHandler(&handler{host: abi.NewHost()}) }

func main() {}

// handler implements abi.Handler with the least possible work.
type handler struct {
	host abi.Host
	// script, when configured, replaces the one header with its writes.
	script *floor.Replay
	enc    abi.PairsEncoder
	buf    []byte
}

var _ abi.Handler = (*handler)(nil)

func (*handler) OnContextCreate(uint32, uint32) {}
func (*handler) OnVMStart(uint32, int) bool     { return true }
func (*handler) OnDelete(uint32)                {}
func (*handler) OnTick(uint32)                  {}

// OnResponseHeaders does nothing: the export is the ABI layer's.
func (*handler) OnResponseHeaders(uint32, int, bool) abi.Action { return abi.ActionContinue }

// OnRequestBody does nothing: the export is the ABI layer's (OFREP's).
func (*handler) OnRequestBody(uint32, int, bool) abi.Action { return abi.ActionContinue }

// OnConfigure reads an optional write script. Variant E's configuration is
// an empty Struct: no script.
func (h *handler) OnConfigure(_ uint32, size int) bool {
	if size == 0 {
		return true
	}
	b, err := h.host.GetBuffer(abi.BufferPluginConfiguration, 0, size)
	if err != nil {
		return false
	}
	if !strings.HasPrefix(string(b), floor.Magic) {
		return true
	}
	sc, err := floor.Parse(string(b))
	if err != nil {
		h.host.Log(wire.LogCritical, "minwasm: "+err.Error())
		return false
	}
	h.script = sc.Compile()
	return true
}

// OnRequestHeaders reads the unit id, hashes it and adds one minimal.Header, or
// makes the script's writes.
func (h *handler) OnRequestHeaders(uint32, int, bool) abi.Action {
	pairs, err := h.host.GetHeaderMapPairs(abi.RequestHeaders)
	if err != nil {
		return abi.ActionContinue
	}
	for _, kv := range pairs {
		if kv[0] == minimal.UnitHeader && kv[1] != "" {
			if h.script != nil {
				h.replay(pairs, minimal.Variation(kv[1]))
				break
			}
			h.host.AddHeaderMapValue(abi.RequestHeaders, minimal.Header, minimal.Variation(kv[1]))
			break
		}
	}
	return abi.ActionContinue
}

// replay makes the script's writes, with v in place of every "$v".
func (h *handler) replay(pairs [][2]string, v string) {
	sc := h.script
	if sc.Rewrite {
		h.enc.Reset()
		for _, kv := range pairs {
			h.enc.Add(kv[0], kv[1])
		}
		for i := range sc.Headers {
			h.enc.Add(sc.Headers[i].Name, h.value(&sc.Headers[i], v))
		}
		h.host.SetHeaderMapPairs(abi.RequestHeaders, h.enc.Bytes())
	} else {
		for i := range sc.Headers {
			h.host.AddHeaderMapValue(abi.RequestHeaders, sc.Headers[i].Name, h.value(&sc.Headers[i], v))
		}
	}
	for i := range sc.Props {
		h.host.SetProperty(sc.Props[i].Name, abi.Bytes(h.value(&sc.Props[i], v)))
	}
}

// value is w's value with v substituted, in h's scratch buffer (valid
// until the next call).
func (h *handler) value(w *floor.Value, v string) string {
	h.buf = w.Append(h.buf[:0], v)
	return abi.StringView(h.buf)
}
