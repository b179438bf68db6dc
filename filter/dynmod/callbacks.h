// The callbacks into Envoy the module calls: one list, ALLOT_CALLBACKS, that
// declares them (here, for host.go and hooks.c) and that the check of which
// resolved walks (callbacks.c). A callback declared anywhere else would
// escape the check: the test TestCallbacksListed fails on one.
//
// They are declared weak, so the module loads whether or not each resolves:
// a test binary links without any, and an Envoy of another ABI may lack
// some. A missing one is NULL, and calling it would jump to address 0, so
// config-new refuses every configuration unless all resolved
// (exports.go).
//
// A second list, ALLOT_REPLY_CALLBACKS, are the callbacks a local reply
// needs (reply.c: the request body read, the response sent). Only a
// configuration that answers requests itself calls them, so only such a
// configuration is refused while one is missing (LocalReplyUnsupported);
// every other configuration loads without them. Both lists make one table
// (callbacks.c), which the check and TestCallbacksListed walk.

#ifndef ALLOT_CALLBACKS_H
#define ALLOT_CALLBACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"

// ALLOT_CALLBACKS(X) calls X(return type, name, parameters) once per
// callback, as declared in Envoy 1.40's
// source/extensions/dynamic_modules/abi/abi.h (ABI v0.2.0), pointers the
// ABI types as pointers passed as uintptr_t.
#define ALLOT_CALLBACKS(X)                                                                                        \
  X(void, envoy_dynamic_module_callback_log, (int32_t level, allot_buffer message))                              \
  X(bool, envoy_dynamic_module_callback_log_enabled, (int32_t level))                                            \
  X(uint32_t, envoy_dynamic_module_callback_get_concurrency, (void))                                             \
  X(size_t, envoy_dynamic_module_callback_http_get_headers_size, (uintptr_t filter, int32_t header_type))        \
  X(bool, envoy_dynamic_module_callback_http_get_headers,                                                        \
    (uintptr_t filter, int32_t header_type, allot_header * result))                                              \
  X(bool, envoy_dynamic_module_callback_http_add_header,                                                         \
    (uintptr_t filter, int32_t header_type, allot_buffer key, allot_buffer value))                               \
  X(bool, envoy_dynamic_module_callback_http_set_header,                                                         \
    (uintptr_t filter, int32_t header_type, allot_buffer key, allot_buffer value))                               \
  X(bool, envoy_dynamic_module_callback_http_filter_get_attribute_string,                                        \
    (uintptr_t filter, int32_t id, allot_buffer * result))                                                       \
  X(bool, envoy_dynamic_module_callback_http_filter_get_attribute_int,                                           \
    (uintptr_t filter, int32_t id, uint64_t * result))                                                           \
  X(bool, envoy_dynamic_module_callback_http_set_filter_state_bytes,                                             \
    (uintptr_t filter, allot_buffer key, allot_buffer value))                                                    \
  X(uint32_t, envoy_dynamic_module_callback_http_filter_get_worker_index, (uintptr_t filter))                    \
  X(int32_t, envoy_dynamic_module_callback_http_filter_config_define_counter,                                    \
    (uintptr_t config, allot_buffer name, allot_buffer * label_names, size_t label_names_length, size_t * id))   \
  X(int32_t, envoy_dynamic_module_callback_http_filter_increment_counter,                                        \
    (uintptr_t filter, size_t id, allot_buffer * label_values, size_t label_values_length, uint64_t value))      \
  X(int32_t, envoy_dynamic_module_callback_http_filter_config_increment_counter,                                 \
    (uintptr_t config, size_t id, allot_buffer * label_values, size_t label_values_length, uint64_t value))      \
  X(void, envoy_dynamic_module_callback_http_clear_route_cache, (uintptr_t filter))                             \
  X(bool, envoy_dynamic_module_callback_http_get_header,                                                         \
    (uintptr_t filter, int32_t header_type, allot_buffer key, allot_buffer * result, size_t index,              \
     size_t * optional_size))                                                                                    \
  X(int32_t, envoy_dynamic_module_callback_http_filter_config_define_histogram,                                  \
    (uintptr_t config, allot_buffer name, allot_buffer * label_names, size_t label_names_length, size_t * id))   \
  X(int32_t, envoy_dynamic_module_callback_http_filter_record_histogram_value,                                   \
    (uintptr_t filter, size_t id, allot_buffer * label_values, size_t label_values_length, uint64_t value))

// ALLOT_REPLY_CALLBACKS(X) is the same for the callbacks of a local reply
// (Envoy 1.39 and 1.40 export all of them, with these signatures): a body
// type is envoy_dynamic_module_type_http_body_type (ALLOT_BODY_*, reply.h).
#define ALLOT_REPLY_CALLBACKS(X)                                                                                  \
  X(size_t, envoy_dynamic_module_callback_http_get_body_chunks_size, (uintptr_t filter, int32_t body_type))       \
  X(bool, envoy_dynamic_module_callback_http_get_body_chunks,                                                     \
    (uintptr_t filter, int32_t body_type, allot_buffer * result))                                                 \
  X(bool, envoy_dynamic_module_callback_http_received_buffered_request_body, (uintptr_t filter))                  \
  X(void, envoy_dynamic_module_callback_http_send_response,                                                       \
    (uintptr_t filter, uint32_t status, allot_header * headers, size_t n, allot_buffer body, allot_buffer details))

#define ALLOT_DECLARE_CALLBACK(ret, name, params) extern ret name params __attribute__((weak));
ALLOT_CALLBACKS(ALLOT_DECLARE_CALLBACK)
ALLOT_REPLY_CALLBACKS(ALLOT_DECLARE_CALLBACK)
#undef ALLOT_DECLARE_CALLBACK

// allot_callback_count is the number of callbacks in ALLOT_CALLBACKS and
// ALLOT_REPLY_CALLBACKS, in that order.
size_t allot_callback_count(void);

// allot_callback_reply reports whether callback i is a local reply's
// (ALLOT_REPLY_CALLBACKS).
bool allot_callback_reply(size_t i);

// allot_callback_name is callback i's name, a static string.
const char* allot_callback_name(size_t i);

// allot_callback_resolved reports whether callback i resolved.
bool allot_callback_resolved(size_t i);

#endif
