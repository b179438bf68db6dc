//go:build wasip1

package abi

import "unsafe"

// The callbacks Envoy calls. Only those Allot needs are exported: every
// export the host finds is a host→Go crossing it makes on every stream, so
// trailer callbacks and the response body's are deliberately absent, and so is
// proxy_on_done (without it the host treats every context as done at once;
// roots flush their counters in proxy_on_delete instead). Response headers
// are exported for sticky bucketing's Set-Cookie (exports_response_wasip1.go).

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

// pending holds buffers handed to the host by proxy_on_memory_allocate until
// the host call that requested them returns and takeAlloc claims them. Go's
// collector does not move objects, so a held slice keeps its address valid.
var pending [][]byte

// reuse, when set by a host call wrapper, is a buffer the next allocation
// may use instead of a new one (growing it if needed): the request path's
// header read then allocates nothing once the buffer has grown.
var reuse *[]byte

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) uint32 {
	var b []byte
	if reuse != nil {
		if cap(*reuse) < int(size) {
			*reuse = make([]byte, size, size+size/2)
		}
		b = (*reuse)[:max(size, 1):cap(*reuse)]
		reuse = nil
	} else {
		b = make([]byte, max(size, 1))
	}
	pending = append(pending, b)
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// takeAlloc returns the buffer the host filled at address p (n bytes) and
// releases every other pending allocation.
func takeAlloc(p, n uint32) []byte {
	var out []byte
	for _, b := range pending {
		if uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) == p && int(n) <= len(b) {
			out = b[:n:n]
		}
	}
	clear(pending)
	pending = pending[:0]
	return out
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {
	if handler != nil {
		handler.OnContextCreate(id, parent)
	}
}

//go:wasmexport proxy_on_vm_start
func onVMStart(rootID, size uint32) uint32 {
	if handler == nil {
		return 1
	}
	return boolWord(handler.OnVMStart(rootID, int(size)))
}

//go:wasmexport proxy_on_configure
func onConfigure(rootID, size uint32) uint32 {
	if handler == nil {
		return 0
	}
	return boolWord(handler.OnConfigure(rootID, int(size)))
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, numHeaders, endOfStream uint32) uint32 {
	if handler == nil {
		return uint32(ActionContinue)
	}
	return uint32(handler.OnRequestHeaders(id, int(numHeaders), endOfStream != 0))
}

// proxy_on_request_body carries an OFREP evaluation's body (the filter
// answers it itself where the configuration enables OFREP). A module
// cannot export a callback for some configurations only, so every request
// body chunk of every mesh costs this crossing, which returns at once for
// a stream the filter does not hold.
//
//go:wasmexport proxy_on_request_body
func onRequestBody(id, bodySize, endOfStream uint32) uint32 {
	if handler == nil {
		return uint32(ActionContinue)
	}
	return uint32(handler.OnRequestBody(id, int(bodySize), endOfStream != 0))
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	if handler != nil {
		handler.OnDelete(id)
	}
}

//go:wasmexport proxy_on_tick
func onTick(rootID uint32) {
	if handler != nil {
		handler.OnTick(rootID)
	}
}

func boolWord(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
