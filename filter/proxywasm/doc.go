// Package proxywasm is the Allot filter's proxy-wasm adapter: the
// abi.Handler (Handler) that the Wasm module installs, and plugin.Host over
// proxy-wasm's host functions (NewHost). Handler maps the ABI's contexts
// onto the core (filter/plugin): a root context is a plugin root, a stream
// context remembers the root it was created under, a request's sticky
// cookie and outcome observation wait with its stream for the response,
// and the Wasm VM's own runtime figures (vmstats.go) are flushed on tick.
//
// It imports filter/abi and filter/plugin; only the Wasm module
// (filter/main.go), the fake-host tests and bench import it. It must never
// import gRPC, net/http or the control plane.
package proxywasm
