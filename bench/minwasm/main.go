// Command minwasm is benchmark variant E: the smallest useful standard-Go
// proxy-wasm filter. For each request it reads the request headers (one host
// call), hashes x-user-id with GrowthBook's hash v1 (FNV-1a 32 of id+seed,
// modulo 1000) and adds x-experiment-bench: control or treatment (one host
// call). Nothing else: no configuration, no cache, no metrics, no header
// stripping. It is the floor for a Go filter on Envoy's Wasm host, built
// exactly like Allot's filter and over the same ABI layer (filter/abi):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o minwasm.wasm ./bench/minwasm
package main

import "github.com/allotmesh/allot/filter/abi"

// Wire names shared with the benchmark's expectations (bench/suite).
const (
	unitHeader = "x-user-id"
	header     = "x-experiment-bench"
	seed       = "bench"
)

func init() { abi.SetHandler(&handler{host: abi.NewHost()}) }

func main() {}

// handler implements abi.Handler with the least possible work.
type handler struct{ host abi.Host }

var _ abi.Handler = (*handler)(nil)

func (*handler) OnContextCreate(uint32, uint32) {}
func (*handler) OnVMStart(uint32, int) bool     { return true }
func (*handler) OnConfigure(uint32, int) bool   { return true }
func (*handler) OnDone(uint32) bool             { return true }
func (*handler) OnDelete(uint32)                {}
func (*handler) OnTick(uint32)                  {}

// OnRequestHeaders reads the unit id, hashes it and adds one header.
func (h *handler) OnRequestHeaders(uint32, int, bool) abi.Action {
	pairs, err := h.host.GetHeaderMapPairs(abi.RequestHeaders)
	if err != nil {
		return abi.ActionContinue
	}
	for _, kv := range pairs {
		if kv[0] == unitHeader && kv[1] != "" {
			h.host.AddHeaderMapValue(abi.RequestHeaders, header, Variation(kv[1]))
			break
		}
	}
	return abi.ActionContinue
}

// Variation is GrowthBook's hash v1 of id with seed "bench" split 50/50:
// FNV-1a 32 over id then seed, modulo 1000, below 500 is control.
func Variation(id string) string {
	h := uint32(2166136261)
	for _, s := range [2]string{id, seed} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= 16777619
		}
	}
	if h%1000 < 500 {
		return "control"
	}
	return "treatment"
}
