// A local reply's callbacks: see reply.h.

#include "reply.h"

#include <stdlib.h>
#include <string.h>

#include "callbacks.h"

// ALLOT_BODY_CHUNKS is how many of a body's chunks fit in the stack; a
// body in more is read in a malloc'd vector.
#define ALLOT_BODY_CHUNKS 16

// allot_body_part appends body part type's chunks to out at *off (cap
// bytes), or only counts their bytes when out is NULL; false if the
// chunks' vector cannot be allocated.
static bool allot_body_part(uintptr_t f, int32_t type, char* out, size_t cap, size_t* off) {
  size_t n = envoy_dynamic_module_callback_http_get_body_chunks_size(f, type);
  if (n == 0) return true;
  allot_buffer stack[ALLOT_BODY_CHUNKS];
  allot_buffer* chunks = n <= ALLOT_BODY_CHUNKS ? stack : malloc(n * sizeof(allot_buffer));
  if (chunks == NULL) return false;
  bool ok = envoy_dynamic_module_callback_http_get_body_chunks(f, type, chunks);
  for (size_t i = 0; ok && i < n; i++) {
    if (out != NULL && chunks[i].length > 0) {
      if (chunks[i].length > cap - *off) {
        ok = false;
        break;
      }
      memcpy(out + *off, chunks[i].ptr, chunks[i].length);
    }
    *off += chunks[i].length;
  }
  if (chunks != stack) free(chunks);
  return ok;
}

size_t allot_request_body(uintptr_t f, char* out, size_t cap) {
  // The received part is the buffered body itself when a filter before
  // this one buffered it all: count it once.
  const bool buffered = !envoy_dynamic_module_callback_http_received_buffered_request_body(f);
  size_t total = 0;
  if ((buffered && !allot_body_part(f, ALLOT_BODY_BUFFERED_REQUEST, NULL, 0, &total)) ||
      !allot_body_part(f, ALLOT_BODY_RECEIVED_REQUEST, NULL, 0, &total)) {
    return ALLOT_BODY_ERROR;
  }
  if (total > cap || total == 0) return total;
  size_t off = 0;
  if ((buffered && !allot_body_part(f, ALLOT_BODY_BUFFERED_REQUEST, out, cap, &off)) ||
      !allot_body_part(f, ALLOT_BODY_RECEIVED_REQUEST, out, cap, &off) || off != total) {
    return ALLOT_BODY_ERROR;
  }
  return off;
}

bool allot_send_response(uintptr_t f, uint32_t status, const char* data, const uint32_t* lens, size_t n,
                         const char* body, size_t body_length) {
  if (n > ALLOT_REPLY_MAX_HEADERS) return false;
  allot_header h[ALLOT_REPLY_MAX_HEADERS];
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    h[i].key_ptr = data + off;
    h[i].key_length = lens[2 * i];
    off += lens[2 * i];
    h[i].value_ptr = data + off;
    h[i].value_length = lens[2 * i + 1];
    off += lens[2 * i + 1];
  }
  envoy_dynamic_module_callback_http_send_response(f, status, n > 0 ? h : NULL, n, (allot_buffer){body, body_length},
                                                   (allot_buffer){NULL, 0});
  return true;
}
