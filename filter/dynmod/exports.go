package dynmod

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"
#cgo nocallback allot_stream_config
*/
import "C"

import "unsafe"

// The four hooks that need Go, of those Envoy 1.40 resolves when it loads an
// HTTP filter module (the others are C: hooks.c). The ABI's pointer types
// are passed as uintptr_t here: the same registers. Hooks that return a
// status return 0, Continue.

//export envoy_dynamic_module_on_program_init
func envoy_dynamic_module_on_program_init() (version *C.char) {
	defer func() {
		if v := recover(); v != nil {
			recovered("program_init", v)
			version = abiVersion // NULL would make Envoy unload the module
		}
	}()
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

//export envoy_dynamic_module_on_http_filter_request_headers
func envoy_dynamic_module_on_http_filter_request_headers(f, m C.uintptr_t, endOfStream C.bool) C.int32_t {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_request_headers", v)
		}
	}()
	if handler != nil {
		s, h := streamOf(uintptr(m))
		handler.RequestHeaders(Filter(f), s, h, bool(endOfStream))
	}
	return 0
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
