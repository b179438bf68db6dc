// A local reply (issue #45: the filter answers a request itself): the
// request body read out of Envoy's buffers and the response sent, each a
// single call from Go. The callbacks are ALLOT_REPLY_CALLBACKS
// (callbacks.h); a configuration that needs them is refused while any is
// missing, so nothing here runs without them.

#ifndef ALLOT_REPLY_H
#define ALLOT_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"

// Body types (envoy_dynamic_module_type_http_body_type).
#define ALLOT_BODY_RECEIVED_REQUEST 0
#define ALLOT_BODY_BUFFERED_REQUEST 1

// Statuses of the request-headers hook
// (envoy_dynamic_module_type_on_http_filter_request_headers_status):
// Continue, and StopIteration (the headers go no further; the body hook is
// still called, and the filter may send a local reply).
#define ALLOT_HEADERS_CONTINUE 0
#define ALLOT_HEADERS_STOP_ITERATION 1

// Statuses of the request-body hook
// (envoy_dynamic_module_type_on_http_filter_request_body_status):
// Continue, StopIterationAndBuffer (Envoy keeps the part in the buffered
// body, up to its buffer limit, over which it answers 413 itself) and
// StopIterationNoBuffer.
#define ALLOT_BODY_CONTINUE 0
#define ALLOT_BODY_STOP_AND_BUFFER 1
#define ALLOT_BODY_STOP_NO_BUFFER 3

// Statuses of the request-trailers hook: Continue and StopIteration.
#define ALLOT_TRAILERS_CONTINUE 0
#define ALLOT_TRAILERS_STOP_ITERATION 1

// ALLOT_REPLY_MAX_HEADERS bounds a local reply's headers (the plugin sends
// a handful).
#define ALLOT_REPLY_MAX_HEADERS 64

// allot_request_body copies the request body so far into out (cap bytes)
// and returns its length: the buffered body, then the part this body hook
// received (Envoy adds it to the buffered body only after the hook
// returns) unless that part is the buffered body itself (a filter before
// this one buffered the whole body). When the body is longer than cap it
// copies nothing: the caller grows out and asks again. No body: 0;
// ALLOT_BODY_ERROR if Envoy did not give the chunks (or no memory for
// their vector).
#define ALLOT_BODY_ERROR SIZE_MAX
size_t allot_request_body(uintptr_t filter, char* out, size_t cap);

// allot_send_response sends a local reply: status, n headers whose names
// and values lie back to back in data (lens[2i], lens[2i+1] the lengths of
// header i's), and body. False, sending nothing, over
// ALLOT_REPLY_MAX_HEADERS headers.
bool allot_send_response(uintptr_t filter, uint32_t status, const char* data, const uint32_t* lens, size_t n,
                         const char* body, size_t body_length);

#endif
