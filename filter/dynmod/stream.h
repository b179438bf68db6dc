// The ABI's buffer and header, and the state a stream of an even-handled
// configuration keeps (hooks.c).

#ifndef ALLOT_STREAM_H
#define ALLOT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { const char* ptr; size_t length; } allot_buffer;

// allot_header is the ABI's header: a name and a value.
typedef struct { const char* key_ptr; size_t key_length; const char* value_ptr; size_t value_length; } allot_header;

// ALLOT_OUTCOME_IDS is the number of Envoy stat ids of one observed
// variation: a counter per outcome class (2xx, 3xx, 4xx, 5xx, other, reset:
// plugin.NumClasses, in its order), then the latency histogram.
#define ALLOT_OUTCOME_IDS 7
#define ALLOT_CLASS_OTHER 4
#define ALLOT_CLASS_RESET 5

typedef struct {
  uintptr_t config;  // the configuration's handle
  // header is a response header to add, name then value back to back
  // (malloc'd; NULL: none).
  char* header;
  size_t name_length, value_length;
  // outcomes are the stat ids of the observed variations the request was
  // assigned, ALLOT_OUTCOME_IDS each (malloc'd; NULL: none), n_outcomes
  // their number; start_ns the monotonic clock at the request headers;
  // envoy_config Envoy's side of the configuration, whose counters a stream
  // that ends without response headers counts in.
  size_t* outcomes;
  size_t n_outcomes;
  int64_t start_ns;
  uintptr_t envoy_config;
} allot_stream;

// allot_now_ns is the monotonic clock in nanoseconds.
static inline int64_t allot_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// allot_status_class is the outcome class of a :status value (as
// plugin.StatusClass).
static inline int allot_status_class(const char* s, size_t n) {
  if (s == NULL || n != 3 || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9') return ALLOT_CLASS_OTHER;
  if (s[0] >= '2' && s[0] <= '5') return s[0] - '2';
  return ALLOT_CLASS_OTHER;
}

// allot_stream_observe copies n observed variations' stat ids
// (ALLOT_OUTCOME_IDS each) into the stream, replacing any, and starts its
// clock; false if there is no memory (the stream is then not observed).
static inline bool allot_stream_observe(uintptr_t stream, uintptr_t envoy_config, const size_t* ids, size_t n) {
  allot_stream* s = (allot_stream*)stream;
  size_t* o = malloc(n * ALLOT_OUTCOME_IDS * sizeof(size_t));
  if (o == NULL) return false;
  memcpy(o, ids, n * ALLOT_OUTCOME_IDS * sizeof(size_t));
  free(s->outcomes);
  s->outcomes = o;
  s->n_outcomes = n;
  s->envoy_config = envoy_config;
  s->start_ns = allot_now_ns();
  return true;
}

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
