//go:build cgo

// Package dynmod is Allot's layer over Envoy's dynamic-modules ABI for HTTP
// filters (ABI v0.2.0, Envoy 1.40): the event hooks the module exports and
// the callbacks into Envoy it calls, declared from
// source/extensions/dynamic_modules/abi/abi.h in envoyproxy/envoy. Nothing
// above this package touches C types, cgo or Envoy's pointers; like
// filter/abi for proxy-wasm, it declares only what Allot uses.
//
// The module is built with cgo as a shared object (-buildmode=c-shared) that
// Envoy dlopens; the callbacks are resolved against the Envoy executable at
// load time. They are declared weak, so a test binary links without Envoy
// and never calls them: tests drive a Handler with a fake host instead.
// Weak, a callback an Envoy lacks (another ABI: Envoy only warns about the
// version) is NULL rather than a load error, so the module checks them all
// (one list, ALLOT_CALLBACKS in callbacks.h, declares them and is what the
// check walks): while any is missing it calls none, the Handler is never
// initialized, and config-new refuses every configuration with a critical
// log naming the missing ones and the ABI (on standard error if the log
// callback is one of them).
//
// Every hook recovers a panic: one that escaped would abort Envoy. A panic a
// Handler lets escape is counted (Panics) and the hook answers as if the
// module were absent (continue the stream; NULL from config-new, which makes
// Envoy reject the configuration).
//
// A request the Handler answers itself (a local reply: issue #45's OFREP)
// stops at its headers (HeadersStop) and, to read its body, marks its
// stream (Stream.AwaitBody): that stream's body and trailers hooks then
// call the Handler's RequestBody, which reads the body (Filter.RequestBody)
// and sends the reply (Filter.SendResponse). The callbacks a local reply
// needs are a list of their own (ALLOT_REPLY_CALLBACKS): a configuration
// that answers requests is refused while one is missing
// (LocalReplyUnsupported), any other loads without them.
//
// Envoy refuses the filter unless the module exports every HTTP-filter
// hook. Three are Go (exports.go): program-init, config-new and
// config-destroy. Request-headers is C (warm.c): it serves a request of a
// configuration with a warm plan from its worker's C cache when it can
// (WarmConfig), and calls the Go half, which runs the Handler, for any
// other. The rest, the stream's own filter-new and filter-destroy among
// them, are C (hooks.c), so that a request crosses from Envoy into Go at
// most once.
//
// This package imports only the standard library, filter/internal/panics
// and filter/wire (its log levels, wire.LogLevel); it must never import the
// filter's core (filter/plugin), gRPC or net/http.
package dynmod

/*
#include "reply.h"
*/
import "C"

import (
	"sync/atomic"

	"github.com/allotmesh/allot/filter/internal/panics"
	"github.com/allotmesh/allot/filter/wire"
)

// ABIVersion is the version string Envoy 1.40 expects from
// envoy_dynamic_module_on_program_init (a mismatch only makes Envoy warn).
const ABIVersion = "v0.2.0"

// Handler receives the hooks Allot uses. Envoy calls the config hooks on
// its main thread and the filter hooks on the worker thread that owns the
// stream, so different workers call a Handler concurrently.
type Handler interface {
	// ProgramInit is called once, on the main thread, when Envoy loads the
	// module; concurrency is Envoy's number of worker threads.
	ProgramInit(concurrency uint32)
	// ConfigNew compiles a filter configuration and returns its non-zero
	// handle (a WarmHandler's: a WarmConfig's Handle, Stateless set or
	// not); 0 rejects the configuration (Envoy keeps the previous one).
	// The config bytes are valid only during the call.
	ConfigNew(c Config, name string, config []byte) uintptr
	// ConfigDestroy releases a configuration: no stream uses it any more.
	ConfigDestroy(handle uintptr)
	// RequestHeaders is called when a stream's request headers arrive and
	// the warm path (warm.c) did not serve them, with the handle of the
	// stream's configuration and, if the handle is even, the stream's state
	// (else 0). It returns HeadersContinue, or HeadersStop for a request
	// the Handler answers itself (a local reply sent, or its body awaited:
	// Stream.AwaitBody). It is the only hook a header request enters Go
	// for: creating and destroying a stream and its response hooks are C
	// (hooks.c).
	RequestHeaders(f Filter, s Stream, handle uintptr, endOfStream bool) HeadersStatus
	// RequestBody is called with each part of the request body of a stream
	// that awaits it (Stream.AwaitBody), endOfStream set on the last (or
	// on the request's trailers, the body then all buffered), until it
	// returns anything but BodyStopAndBuffer.
	RequestBody(f Filter, s Stream, handle uintptr, endOfStream bool) BodyStatus
}

// HeadersStatus is the request-headers hook's answer to Envoy
// (envoy_dynamic_module_type_on_http_filter_request_headers_status).
type HeadersStatus int32

// The request-headers statuses the module answers.
const (
	// HeadersContinue passes the headers on.
	HeadersContinue HeadersStatus = C.ALLOT_HEADERS_CONTINUE
	// HeadersStop holds them (StopIteration): the request goes no further
	// while the body hook is still called, as a local reply needs.
	HeadersStop HeadersStatus = C.ALLOT_HEADERS_STOP_ITERATION
)

// BodyStatus is the request-body hook's answer to Envoy
// (envoy_dynamic_module_type_on_http_filter_request_body_status).
type BodyStatus int32

// The request-body statuses the module answers.
const (
	// BodyContinue passes the body (and the held headers) on.
	BodyContinue BodyStatus = C.ALLOT_BODY_CONTINUE
	// BodyStopAndBuffer holds the part in Envoy's buffer, bounded by
	// Envoy's buffer limit (over it, Envoy answers 413 itself), and waits
	// for the next.
	BodyStopAndBuffer BodyStatus = C.ALLOT_BODY_STOP_AND_BUFFER
	// BodyStopNoBuffer stops the request for good: its reply was sent.
	BodyStopNoBuffer BodyStatus = C.ALLOT_BODY_STOP_NO_BUFFER
)

// WarmHandler is a Handler whose every handle is a WarmConfig's Handle
// (Stateless aside): the C request hook (warm.c) reads a configuration's
// C side through it, and serves what the warm path can without Go. For
// any other Handler the C hook calls Go at once and never reads a handle.
type WarmHandler interface {
	Handler
	// WarmHandles marks the Handler; it is never called.
	WarmHandles()
}

// Handles. ConfigNew's handle says, by its low bit, whether the
// configuration's streams keep state: an odd handle's keep none (a
// stream's module value is the handle), and its responses touch no memory
// of the module's; an even handle's each get a small C struct in which the
// request hook may leave one response header (Stream.SetResponseHeader)
// for the response-headers hook to add, in C.
const (
	// Stateless is the bit ConfigNew sets in the handle of a configuration
	// whose streams keep no state.
	Stateless uintptr = 1
)

// Stream is the state of one stream of an even-handled configuration
// (hooks.c's allot_stream), valid during the stream's hooks; 0: none.
type Stream uintptr

var (
	handler    Handler
	recoveries atomic.Uint64
)

// SetHandler installs the hooks' receiver. Call it from main's init.
func SetHandler(h Handler) {
	handler = h
	_, warm := h.(WarmHandler)
	setWarmHandles(warm)
}

// Panics is how many panics the hooks recovered since the module loaded.
func Panics() uint64 { return recoveries.Load() }

// recovered counts and logs a panic a hook recovered. The log is at error
// level: a panic out of a Handler is a bug, never a request's fault, and it
// is rare by construction (the plugin recovers its own).
func recovered(hook string, v any) {
	recoveries.Add(1)
	defer func() { recover() }() // the log must not panic out of the hook either
	Log(wire.LogError, "allot: panic recovered in "+hook+": "+panics.Message(v))
}

// Attribute is envoy_dynamic_module_type_attribute_id: a request attribute
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/advanced/attributes)
// as numbered by the ABI. Only those Envoy 1.40 answers are listed.
type Attribute int32

// Attributes Envoy 1.40 answers through get_attribute_string (S) or
// get_attribute_int (I).
const (
	AttrRequestPath        Attribute = 0  // S request.path
	AttrRequestURLPath     Attribute = 1  // S request.url_path
	AttrRequestHost        Attribute = 2  // S request.host
	AttrRequestScheme      Attribute = 3  // S request.scheme
	AttrRequestMethod      Attribute = 4  // S request.method
	AttrRequestReferer     Attribute = 6  // S request.referer
	AttrRequestUserAgent   Attribute = 7  // S request.useragent
	AttrRequestID          Attribute = 9  // S request.id
	AttrRequestProtocol    Attribute = 10 // S request.protocol
	AttrRequestQuery       Attribute = 11 // S request.query
	AttrSourceAddress      Attribute = 24 // S source.address
	AttrSourcePort         Attribute = 25 // I source.port
	AttrDestinationAddress Attribute = 26 // S destination.address
	AttrDestinationPort    Attribute = 27 // I destination.port
	AttrConnectionID       Attribute = 28 // I connection.id
)
