package dynmod

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct { const char* ptr; size_t length; } allot_buffer;
*/
import "C"

import "unsafe"

// The event hooks Envoy 1.40 resolves when it loads an HTTP filter module.
// The ABI's pointer types are passed as uintptr_t here: the same registers.
// Hooks that return a status return 0, Continue.

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

//export envoy_dynamic_module_on_http_filter_new
func envoy_dynamic_module_on_http_filter_new(h, f C.uintptr_t) (m C.uintptr_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_new", v)
			m = h // a stream without Allot beats a closed one
		}
	}()
	if handler == nil {
		return h
	}
	return C.uintptr_t(handler.FilterNew(uintptr(h), Filter(f)))
}

//export envoy_dynamic_module_on_http_filter_request_headers
func envoy_dynamic_module_on_http_filter_request_headers(f, m C.uintptr_t, endOfStream C.bool) C.int32_t {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_request_headers", v)
		}
	}()
	if handler != nil {
		handler.RequestHeaders(Filter(f), uintptr(m), bool(endOfStream))
	}
	return 0
}

//export envoy_dynamic_module_on_http_filter_destroy
func envoy_dynamic_module_on_http_filter_destroy(m C.uintptr_t) {
	defer func() {
		if v := recover(); v != nil {
			recovered("http_filter_destroy", v)
		}
	}()
	if handler != nil {
		handler.FilterDestroy(uintptr(m))
	}
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

// The hooks Allot has no use for. Envoy refuses the filter unless each is
// exported; none can panic.

//export envoy_dynamic_module_on_http_filter_per_route_config_new
func envoy_dynamic_module_on_http_filter_per_route_config_new(name, config C.allot_buffer) C.uintptr_t {
	return 0 // Allot has no per-route configuration: refuse one
}

//export envoy_dynamic_module_on_http_filter_per_route_config_destroy
func envoy_dynamic_module_on_http_filter_per_route_config_destroy(C.uintptr_t) {}

//export envoy_dynamic_module_on_http_filter_request_body
func envoy_dynamic_module_on_http_filter_request_body(f, m C.uintptr_t, eos C.bool) C.int32_t {
	return 0
}

//export envoy_dynamic_module_on_http_filter_request_trailers
func envoy_dynamic_module_on_http_filter_request_trailers(f, m C.uintptr_t) C.int32_t { return 0 }

//export envoy_dynamic_module_on_http_filter_response_headers
func envoy_dynamic_module_on_http_filter_response_headers(f, m C.uintptr_t, eos C.bool) C.int32_t {
	return 0
}

//export envoy_dynamic_module_on_http_filter_response_body
func envoy_dynamic_module_on_http_filter_response_body(f, m C.uintptr_t, eos C.bool) C.int32_t {
	return 0
}

//export envoy_dynamic_module_on_http_filter_response_trailers
func envoy_dynamic_module_on_http_filter_response_trailers(f, m C.uintptr_t) C.int32_t { return 0 }

//export envoy_dynamic_module_on_http_filter_stream_complete
func envoy_dynamic_module_on_http_filter_stream_complete(f, m C.uintptr_t) {}

//export envoy_dynamic_module_on_http_filter_local_reply
func envoy_dynamic_module_on_http_filter_local_reply(f, m C.uintptr_t, code C.uint32_t, details C.allot_buffer, reset C.bool) C.int32_t {
	return 0
}

//export envoy_dynamic_module_on_http_filter_http_callout_done
func envoy_dynamic_module_on_http_filter_http_callout_done(f, m C.uintptr_t, id C.uint64_t, result C.int32_t, headers C.uintptr_t, nh C.size_t, body C.uintptr_t, nb C.size_t) {
}

//export envoy_dynamic_module_on_http_filter_http_stream_headers
func envoy_dynamic_module_on_http_filter_http_stream_headers(f, m C.uintptr_t, id C.uint64_t, headers C.uintptr_t, n C.size_t, eos C.bool) {
}

//export envoy_dynamic_module_on_http_filter_http_stream_data
func envoy_dynamic_module_on_http_filter_http_stream_data(f, m C.uintptr_t, id C.uint64_t, data C.uintptr_t, n C.size_t, eos C.bool) {
}

//export envoy_dynamic_module_on_http_filter_http_stream_trailers
func envoy_dynamic_module_on_http_filter_http_stream_trailers(f, m C.uintptr_t, id C.uint64_t, trailers C.uintptr_t, n C.size_t) {
}

//export envoy_dynamic_module_on_http_filter_http_stream_complete
func envoy_dynamic_module_on_http_filter_http_stream_complete(f, m C.uintptr_t, id C.uint64_t) {}

//export envoy_dynamic_module_on_http_filter_http_stream_reset
func envoy_dynamic_module_on_http_filter_http_stream_reset(f, m C.uintptr_t, id C.uint64_t, reason C.int32_t) {
}

//export envoy_dynamic_module_on_http_filter_scheduled
func envoy_dynamic_module_on_http_filter_scheduled(f, m C.uintptr_t, id C.uint64_t) {}

//export envoy_dynamic_module_on_http_filter_config_scheduled
func envoy_dynamic_module_on_http_filter_config_scheduled(c, h C.uintptr_t, id C.uint64_t) {}

//export envoy_dynamic_module_on_http_filter_config_http_callout_done
func envoy_dynamic_module_on_http_filter_config_http_callout_done(c, h C.uintptr_t, id C.uint64_t, result C.int32_t, headers C.uintptr_t, nh C.size_t, body C.uintptr_t, nb C.size_t) {
}

//export envoy_dynamic_module_on_http_filter_config_http_stream_headers
func envoy_dynamic_module_on_http_filter_config_http_stream_headers(c, h C.uintptr_t, id C.uint64_t, headers C.uintptr_t, n C.size_t, eos C.bool) {
}

//export envoy_dynamic_module_on_http_filter_config_http_stream_data
func envoy_dynamic_module_on_http_filter_config_http_stream_data(c, h C.uintptr_t, id C.uint64_t, data C.uintptr_t, n C.size_t, eos C.bool) {
}

//export envoy_dynamic_module_on_http_filter_config_http_stream_trailers
func envoy_dynamic_module_on_http_filter_config_http_stream_trailers(c, h C.uintptr_t, id C.uint64_t, trailers C.uintptr_t, n C.size_t) {
}

//export envoy_dynamic_module_on_http_filter_config_http_stream_complete
func envoy_dynamic_module_on_http_filter_config_http_stream_complete(c, h C.uintptr_t, id C.uint64_t) {
}

//export envoy_dynamic_module_on_http_filter_config_http_stream_reset
func envoy_dynamic_module_on_http_filter_config_http_stream_reset(c, h C.uintptr_t, id C.uint64_t, reason C.int32_t) {
}

//export envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark
func envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(f, m C.uintptr_t) {
}

//export envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark
func envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(f, m C.uintptr_t) {
}
