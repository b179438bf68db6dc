package dynmod

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"
#cgo nocallback allot_stream_config
*/
import "C"

import (
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/allotmesh/allot/filter/wire"
)

// The hooks that need Go, of those Envoy 1.40 resolves when it loads an
// HTTP filter module: three, the Go half of the fourth, request headers,
// whose C half (warm.c) serves warm requests itself, and the Go half of
// request body and trailers, for a stream awaiting its body (the others
// are C: hooks.c). The ABI's pointer types are passed as uintptr_t here:
// the same registers. Hooks that return a status return Continue unless
// the Handler answers the request itself.

//export envoy_dynamic_module_on_program_init
func envoy_dynamic_module_on_program_init() (version *C.char) {
	defer func() {
		if v := recover(); v != nil {
			recovered("program_init", v)
			version = abiVersion // NULL would make Envoy unload the module
		}
	}()
	// Without every callback, the module makes no call into Envoy: the
	// Handler is not initialized, and config-new refuses every
	// configuration, saying why. NULL here would make Envoy refuse only
	// the first load: the module stays resident (a Go runtime cannot be
	// unloaded), and Envoy 1.40 skips program-init when it finds a module
	// resident, so every later load reaches config-new anyway.
	if len(unresolved()) > 0 {
		return abiVersion
	}
	if handler != nil {
		handler.ProgramInit(concurrency())
	}
	return abiVersion
}

//export envoy_dynamic_module_on_http_filter_config_new
func envoy_dynamic_module_on_http_filter_config_new(c C.uintptr_t, name, config C.allot_buffer) (h C.uintptr_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_config_new", v)
			h = 0
		}
	}()
	if missing := unresolved(); len(missing) > 0 {
		refuse(missing)
		return 0
	}
	if handler == nil {
		return 0
	}
	return C.uintptr_t(handler.ConfigNew(Config(c), goString(name), goBytes(config)))
}

//export envoy_dynamic_module_on_http_filter_config_destroy
func envoy_dynamic_module_on_http_filter_config_destroy(h C.uintptr_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_config_destroy", v)
		}
	}()
	if handler != nil {
		handler.ConfigDestroy(uintptr(h))
	}
}

// allot_go_request_headers is the request-headers hook's Go half: the C
// hook (warm.c) calls it for every request the warm path does not serve.
//
//export allot_go_request_headers
func allot_go_request_headers(f, m C.uintptr_t, endOfStream C.bool) (status C.int32_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_request_headers", v)
			status = C.int32_t(HeadersContinue)
		}
	}()
	if handler != nil {
		s, h := streamOf(uintptr(m))
		return C.int32_t(handler.RequestHeaders(Filter(f), s, h, bool(endOfStream)))
	}
	return C.int32_t(HeadersContinue)
}

// allot_go_request_body is the Go half of the body and trailers hooks of a
// stream that awaits its body (hooks.c); a panic passes the request on
// (BodyContinue), as a module that did nothing would.
//
//export allot_go_request_body
func allot_go_request_body(f, m C.uintptr_t, endOfStream C.bool) (status C.int32_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_request_body", v)
			status = C.int32_t(BodyContinue)
		}
	}()
	if handler != nil {
		s, h := streamOf(uintptr(m))
		return C.int32_t(handler.RequestBody(Filter(f), s, h, bool(endOfStream)))
	}
	return C.int32_t(BodyContinue)
}

// unresolved names the callbacks into Envoy that did not resolve when
// Envoy loaded the module, found once: the module calls none of them, and
// refuses every configuration while any is missing. Tests replace it.
var unresolved = sync.OnceValue(unresolvedCallbacks)

// refuse says, at critical level, that a configuration is rejected
// because Envoy lacks the callbacks missing: through Envoy's log, or on
// standard error when Envoy lacks its log callback too.
func refuse(missing []string) {
	msg := "allot: configuration rejected: this Envoy lacks callbacks the module calls: " + strings.Join(missing, ", ") +
		" (the module is built for Envoy's dynamic-modules ABI " + ABIVersion + ", Envoy 1.40; this Envoy: " + envoyRelease() + ")"
	if inEnvoy() {
		Log(wire.LogCritical, msg)
		return
	}
	os.Stderr.WriteString(msg + "\n")
}

// streamOf resolves a stream's module value (hooks.c): an odd value is its
// configuration's handle, an even one its allot_stream; 0 (a stream whose
// state could not be allocated) has neither, and no configuration has
// handle 0.
func streamOf(m uintptr) (Stream, uintptr) {
	if m&1 == 1 || m == 0 {
		return 0, m
	}
	return Stream(m), uintptr(C.allot_stream_config(C.uintptr_t(m)))
}

// goString copies an Envoy buffer into a Go string.
func goString(b C.allot_buffer) string {
	if b.ptr == nil || b.length == 0 {
		return ""
	}
	return C.GoStringN(b.ptr, C.int(b.length))
}

// goBytes copies an Envoy buffer into Go memory.
func goBytes(b C.allot_buffer) []byte {
	if b.ptr == nil || b.length == 0 {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(b.ptr), C.int(b.length))
}
