// The ABI's buffer, and the state a stream of an even-handled
// configuration keeps (hooks.c).

#ifndef ALLOT_STREAM_H
#define ALLOT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char* ptr; size_t length; } allot_buffer;

typedef struct {
  uintptr_t config;  // the configuration's handle
  // header is a response header to add, name then value back to back
  // (malloc'd; NULL: none).
  char* header;
  size_t name_length, value_length;
} allot_stream;

// allot_stream_config is the handle of a stream's configuration.
static inline uintptr_t allot_stream_config(uintptr_t s) { return ((allot_stream*)s)->config; }

// allot_stream_set_header copies a response header into the stream,
// replacing any other; false if it could not be allocated.
static inline bool allot_stream_set_header(uintptr_t stream, const char* name, size_t nl, const char* value,
                                           size_t vl) {
  allot_stream* s = (allot_stream*)stream;
  char* h = malloc(nl + vl + 1);
  if (h == NULL) return false;
  memcpy(h, name, nl);
  memcpy(h + nl, value, vl);
  free(s->header);
  s->header = h;
  s->name_length = nl;
  s->value_length = vl;
  return true;
}

#endif
