package dynmod

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "callbacks.h"
#include "reply.h"

#cgo noescape allot_request_body
#cgo nocallback allot_request_body
#cgo noescape allot_send_response
#cgo nocallback allot_send_response
#cgo nocallback allot_stream_await_body
*/
import "C"

import (
	"strings"
	"sync"
	"unsafe"
)

// RequestBody appends the stream's request body so far to dst[:0] and
// returns it: the part its body hook received included (Envoy buffers it
// only after the hook returns), so during the last body hook it is the
// whole body. False if Envoy did not give it. At most two calls into
// Envoy: the second only when dst is too small, which grows it.
func (f Filter) RequestBody(dst []byte) ([]byte, bool) {
	dst = dst[:0]
	for range 2 {
		n := C.allot_request_body(f.ptr(), (*C.char)(unsafe.Pointer(unsafe.SliceData(dst[:cap(dst)]))), C.size_t(cap(dst)))
		switch {
		case n == C.ALLOT_BODY_ERROR:
			return dst, false
		case int(n) <= cap(dst):
			return dst[:n], true
		}
		dst = make([]byte, 0, int(n))
	}
	return dst, false // the body grew between the two calls: never within one hook
}

// ReplyMaxHeaders bounds a local reply's headers (SendResponse).
const ReplyMaxHeaders = C.ALLOT_REPLY_MAX_HEADERS

// SendResponse answers the stream's request with a local reply: status,
// the headers in h and body (Envoy copies them). False, sending nothing,
// over ReplyMaxHeaders headers. The hook that sends it then stops the
// stream (HeadersStop, BodyStopNoBuffer).
func (f Filter) SendResponse(status uint32, h *HeaderBatch, body []byte) bool {
	n := h.Len()
	if n > ReplyMaxHeaders {
		return false
	}
	return bool(C.allot_send_response(f.ptr(), C.uint32_t(status), (*C.char)(unsafe.Pointer(unsafe.SliceData(h.data))),
		(*C.uint32_t)(unsafe.SliceData(h.lens)), C.size_t(n), (*C.char)(unsafe.Pointer(unsafe.SliceData(body))),
		C.size_t(len(body))))
}

// AwaitBody sends the stream's request body to the Handler's RequestBody
// as it arrives (its request hook then returns HeadersStop); false if the
// stream has no state (0: a stateless configuration's, or one whose state
// could not be allocated), whose body never reaches Go.
func (s Stream) AwaitBody() bool { return bool(C.allot_stream_await_body(C.uintptr_t(s))) }

// replyUnresolved names the callbacks of a local reply
// (ALLOT_REPLY_CALLBACKS) that did not resolve, found once; tests replace
// it.
var replyUnresolved = sync.OnceValue(func() []string { return callbacksWhere(true, false) })

// LocalReplyUnsupported says why this Envoy cannot run a configuration that
// answers requests itself (a local reply): the callbacks it lacks, the ABI
// the module was built for and the release found; "" when it has them all.
func LocalReplyUnsupported() string {
	missing := replyUnresolved()
	if len(missing) == 0 {
		return ""
	}
	return "this Envoy lacks callbacks a local reply needs: " + strings.Join(missing, ", ") +
		" (the module is built for Envoy's dynamic-modules ABI " + ABIVersion + ", Envoy 1.40; this Envoy: " + envoyRelease() + ")"
}

// LocalReplyCallbacks names the callbacks of a local reply
// (ALLOT_REPLY_CALLBACKS), which only a configuration that answers
// requests needs.
func LocalReplyCallbacks() []string { return callbacksWhere(true, true) }
