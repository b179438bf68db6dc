package dynmod

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// The callbacks into Envoy, declared weak (callbacks.h); allot_buffer and
// allot_header, the ABI's buffers and headers.
#include "callbacks.h"

// A request's callbacks make no call back into Go and keep no pointer.
#cgo noescape envoy_dynamic_module_callback_log
#cgo nocallback envoy_dynamic_module_callback_log
#cgo noescape envoy_dynamic_module_callback_http_get_headers
#cgo nocallback envoy_dynamic_module_callback_http_get_headers
#cgo nocallback envoy_dynamic_module_callback_http_get_headers_size
#cgo noescape envoy_dynamic_module_callback_http_add_header
#cgo nocallback envoy_dynamic_module_callback_http_add_header
#cgo noescape envoy_dynamic_module_callback_http_set_header
#cgo nocallback envoy_dynamic_module_callback_http_set_header
#cgo noescape envoy_dynamic_module_callback_http_filter_get_attribute_string
#cgo nocallback envoy_dynamic_module_callback_http_filter_get_attribute_string
#cgo noescape envoy_dynamic_module_callback_http_filter_get_attribute_int
#cgo nocallback envoy_dynamic_module_callback_http_filter_get_attribute_int
#cgo noescape envoy_dynamic_module_callback_http_set_filter_state_bytes
#cgo nocallback envoy_dynamic_module_callback_http_set_filter_state_bytes
#cgo nocallback envoy_dynamic_module_callback_http_filter_get_worker_index
#cgo noescape envoy_dynamic_module_callback_http_filter_increment_counter
#cgo nocallback envoy_dynamic_module_callback_http_filter_increment_counter
#cgo noescape envoy_dynamic_module_callback_http_filter_config_increment_counter
#cgo nocallback envoy_dynamic_module_callback_http_filter_config_increment_counter
#cgo nocallback envoy_dynamic_module_callback_http_clear_route_cache

static bool allot_envoy_present(void) { return envoy_dynamic_module_callback_log != NULL; }

// allot_add_headers adds n request headers with one crossing from Go:
// names and values lie back to back in data, lens[2i] and lens[2i+1] are
// header i's name and value lengths. It stops at the first add Envoy
// refuses and returns how many it added.
static size_t allot_add_headers(uintptr_t filter, const char* data, const uint32_t* lens, size_t n) {
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    allot_buffer k = {data + off, lens[2 * i]};
    off += lens[2 * i];
    allot_buffer v = {data + off, lens[2 * i + 1]};
    off += lens[2 * i + 1];
    if (!envoy_dynamic_module_callback_http_add_header(filter, 0, k, v)) return i;  // 0: request headers
  }
  return n;
}
#cgo noescape allot_add_headers
#cgo nocallback allot_add_headers

#cgo noescape allot_stream_observe
#cgo nocallback allot_stream_observe
#cgo noescape envoy_dynamic_module_callback_http_filter_config_define_histogram
#cgo nocallback envoy_dynamic_module_callback_http_filter_config_define_histogram

#cgo noescape allot_status_class
#cgo nocallback allot_status_class

#cgo noescape allot_stream_set_header
#cgo nocallback allot_stream_set_header
#cgo nocallback allot_stream_config
*/
import "C"

import (
	"unsafe"

	"github.com/allotmesh/allot/filter/wire"
)

// abiVersion is the C string on_program_init returns: Envoy reads it after
// the hook returns, so it lives in C memory for good.
var abiVersion = C.CString(ABIVersion)

// inEnvoy reports whether Envoy's log callback resolved, i.e. the module
// runs inside Envoy rather than a test binary (unresolvedCallbacks tells
// whether every other one did).
func inEnvoy() bool { return bool(C.allot_envoy_present()) }

// unresolvedCallbacks names the callbacks into Envoy every configuration
// needs (ALLOT_CALLBACKS in callbacks.h) that did not resolve, in the
// list's order.
func unresolvedCallbacks() []string { return callbacksWhere(false, false) }

// callbacksWhere names the callbacks of ALLOT_REPLY_CALLBACKS (reply) or
// ALLOT_CALLBACKS (!reply), in the list's order: every one (all), or
// those that did not resolve.
func callbacksWhere(reply, all bool) []string {
	var names []string
	for i := range C.allot_callback_count() {
		if bool(C.allot_callback_reply(i)) == reply && (all || !bool(C.allot_callback_resolved(i))) {
			names = append(names, C.GoString(C.allot_callback_name(i)))
		}
	}
	return names
}

// callbackNames names every callback in ALLOT_CALLBACKS and
// ALLOT_REPLY_CALLBACKS.
func callbackNames() []string {
	names := make([]string, C.allot_callback_count())
	for i := range names {
		names[i] = C.GoString(C.allot_callback_name(C.size_t(i)))
	}
	return names
}

// Header map types (envoy_dynamic_module_type_http_header_type).
const requestHeaders = 0

func buf(s string) C.allot_buffer {
	return C.allot_buffer{ptr: (*C.char)(unsafe.Pointer(unsafe.StringData(s))), length: C.size_t(len(s))}
}

func bufBytes(b []byte) C.allot_buffer {
	return C.allot_buffer{ptr: (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), length: C.size_t(len(b))}
}

// Log writes msg to Envoy's log under the dynamic_modules logger.
func Log(level wire.LogLevel, msg string) {
	if !inEnvoy() {
		return
	}
	C.envoy_dynamic_module_callback_log(C.int32_t(level), buf(msg))
}

// LogEnabled reports whether Envoy logs at level, so a caller can skip
// building a message nobody reads.
func LogEnabled(level wire.LogLevel) bool {
	return inEnvoy() && bool(C.envoy_dynamic_module_callback_log_enabled(C.int32_t(level)))
}

// Config is an envoy_dynamic_module_type_http_filter_config_envoy_ptr:
// Envoy's side of one filter configuration, valid until ConfigDestroy.
type Config uintptr

// DefineCounter defines a counter (no labels) and returns its id; only
// during ConfigNew. Its full name is the module's metrics namespace, a
// dot, then name.
func (c Config) DefineCounter(name string) (uint64, bool) {
	var id C.size_t
	r := C.envoy_dynamic_module_callback_http_filter_config_define_counter(C.uintptr_t(c), buf(name), nil, 0, &id)
	return uint64(id), r == 0
}

// DefineHistogram defines a histogram (no labels, Envoy's default buckets)
// and returns its id; only during ConfigNew. Named as DefineCounter's.
func (c Config) DefineHistogram(name string) (uint64, bool) {
	var id C.size_t
	r := C.envoy_dynamic_module_callback_http_filter_config_define_histogram(C.uintptr_t(c), buf(name), nil, 0, &id)
	return uint64(id), r == 0
}

// IncrementCounter adds n to one of the configuration's counters. Envoy's
// counters are atomic, so any thread may call it while the configuration
// lives (until ConfigDestroy returns).
func (c Config) IncrementCounter(id, n uint64) bool {
	return C.envoy_dynamic_module_callback_http_filter_config_increment_counter(C.uintptr_t(c), C.size_t(id), nil, 0, C.uint64_t(n)) == 0
}

// Filter is an envoy_dynamic_module_type_http_filter_envoy_ptr: Envoy's
// side of one stream, valid until Envoy's filter-destroy hook. Its methods may be called
// only from the hooks of that stream, on its worker thread.
type Filter uintptr

func (f Filter) ptr() C.uintptr_t { return C.uintptr_t(f) }

// RequestHeaders appends the stream's request headers to dst as Envoy
// holds them: the strings alias Envoy's header map and are valid only
// until the hook returns or the map changes, whichever is first.
func (f Filter) RequestHeaders(dst []C.allot_header) []C.allot_header {
	n := int(C.envoy_dynamic_module_callback_http_get_headers_size(f.ptr(), requestHeaders))
	if n == 0 {
		return dst[:0]
	}
	if cap(dst) < n {
		dst = make([]C.allot_header, n, n+n/2)
	}
	dst = dst[:n]
	if !C.envoy_dynamic_module_callback_http_get_headers(f.ptr(), requestHeaders, unsafe.SliceData(dst)) {
		return dst[:0]
	}
	return dst
}

// Headers is a stream's request headers as RequestHeaders returns them.
type Headers = []C.allot_header

// HeaderAt returns header i of h: its name and value aliasing Envoy's
// memory (see RequestHeaders).
func HeaderAt(h Headers, i int) (name, value string) {
	e := &h[i]
	return unsafe.String((*byte)(unsafe.Pointer(e.key_ptr)), int(e.key_length)),
		unsafe.String((*byte)(unsafe.Pointer(e.value_ptr)), int(e.value_length))
}

// AddRequestHeader appends a request header, keeping existing copies.
func (f Filter) AddRequestHeader(name, value string) bool {
	return bool(C.envoy_dynamic_module_callback_http_add_header(f.ptr(), requestHeaders, buf(name), buf(value)))
}

// HeaderBatch collects request headers for AddRequestHeaders: each call
// from Go into Envoy costs a crossing of the Go runtime (the thread leaves
// and re-enters the scheduler), so a batch of headers is added with one.
type HeaderBatch struct {
	data []byte
	lens []uint32
}

// Reset empties b, keeping its memory.
func (b *HeaderBatch) Reset() { b.data, b.lens = b.data[:0], b.lens[:0] }

// Add appends a header to b (b copies name and value).
func (b *HeaderBatch) Add(name, value string) {
	b.data = append(append(b.data, name...), value...)
	b.lens = append(b.lens, uint32(len(name)), uint32(len(value)))
}

// Len is the number of headers in b.
func (b *HeaderBatch) Len() int { return len(b.lens) / 2 }

// AddRequestHeaders appends b's headers in order, keeping existing copies,
// and returns how many Envoy added: all of them, unless it refused one
// (then it stops there).
func (f Filter) AddRequestHeaders(b *HeaderBatch) int {
	n := b.Len()
	if n == 0 {
		return 0
	}
	return int(C.allot_add_headers(f.ptr(), (*C.char)(unsafe.Pointer(unsafe.SliceData(b.data))),
		(*C.uint32_t)(unsafe.SliceData(b.lens)), C.size_t(n)))
}

// RemoveRequestHeader removes every copy of a request header (set_header
// with a null value).
func (f Filter) RemoveRequestHeader(name string) bool {
	return bool(C.envoy_dynamic_module_callback_http_set_header(f.ptr(), requestHeaders, buf(name), C.allot_buffer{}))
}

// ClearRouteCache drops the route Envoy chose for the stream, so the
// router chooses again from the request headers as they are now. Envoy
// chooses a route before the first filter runs, from the headers as they
// arrived, and does not clear it after a dynamic module changes them (it
// does after a Wasm filter's changes). Outside the request path it does
// nothing.
func (f Filter) ClearRouteCache() {
	C.envoy_dynamic_module_callback_http_clear_route_cache(f.ptr())
}

// AttributeString reads a string attribute; the result aliases Envoy's
// memory and is valid until the hook returns.
func (f Filter) AttributeString(id Attribute) (string, bool) {
	var out C.allot_buffer
	if !C.envoy_dynamic_module_callback_http_filter_get_attribute_string(f.ptr(), C.int32_t(id), &out) {
		return "", false
	}
	return unsafe.String((*byte)(unsafe.Pointer(out.ptr)), int(out.length)), true
}

// AttributeInt reads an integer attribute.
func (f Filter) AttributeInt(id Attribute) (uint64, bool) {
	var out C.uint64_t
	if !C.envoy_dynamic_module_callback_http_filter_get_attribute_int(f.ptr(), C.int32_t(id), &out) {
		return 0, false
	}
	return uint64(out), true
}

// SetFilterState sets a stream's filter state key to value (Envoy copies
// it), readable in the access log as %FILTER_STATE(key:PLAIN)%.
func (f Filter) SetFilterState(key string, value []byte) bool {
	return bool(C.envoy_dynamic_module_callback_http_set_filter_state_bytes(f.ptr(), buf(key), bufBytes(value)))
}

// WorkerIndex is the index of the worker thread running the stream.
func (f Filter) WorkerIndex() uint32 {
	return uint32(C.envoy_dynamic_module_callback_http_filter_get_worker_index(f.ptr()))
}

// IncrementCounter adds n to a counter that the stream's configuration
// defined (Config.DefineCounter).
func (f Filter) IncrementCounter(id, n uint64) bool {
	return C.envoy_dynamic_module_callback_http_filter_increment_counter(f.ptr(), C.size_t(id), nil, 0, C.uint64_t(n)) == 0
}

// SetResponseHeader leaves a response header for the stream's
// response-headers hook to add (one: a second call replaces the first),
// copying name and value; false if there is no stream state or no memory.
func (s Stream) SetResponseHeader(name, value string) bool {
	if s == 0 {
		return false
	}
	return bool(C.allot_stream_set_header(C.uintptr_t(s), (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)),
		(*C.char)(unsafe.Pointer(unsafe.StringData(value))), C.size_t(len(value))))
}

// OutcomeIDs is the number of stat ids of one observed variation in
// Stream.Observe: a counter per outcome class (wire.NumClasses, in its
// order), then the latency histogram.
const OutcomeIDs = C.ALLOT_OUTCOME_IDS

// Observe leaves the stat ids of the observed variations the stream's
// request was assigned (OutcomeIDs each) for the stream's C hooks, and
// starts its clock: the response-headers hook counts the response's class
// and records its latency in each, and a stream destroyed before any
// response counts it aborted on c's counters. False if there is no stream
// state or no memory.
func (s Stream) Observe(c Config, ids []uint64) bool {
	if s == 0 || len(ids) == 0 || len(ids)%OutcomeIDs != 0 {
		return false
	}
	return bool(C.allot_stream_observe(C.uintptr_t(s), C.uintptr_t(c), (*C.size_t)(unsafe.Pointer(unsafe.SliceData(ids))),
		C.size_t(len(ids)/OutcomeIDs)))
}

// StatusClass is the outcome class the C response hook counts a :status
// value in (allot_status_class), for the test that holds it to the
// plugin's.
func StatusClass(status string) int {
	return int(C.allot_status_class((*C.char)(unsafe.Pointer(unsafe.StringData(status))), C.size_t(len(status))))
}

// concurrency asks Envoy for its number of workers (main thread only).
func concurrency() uint32 {
	if !inEnvoy() {
		return 0
	}
	return uint32(C.envoy_dynamic_module_callback_get_concurrency())
}
