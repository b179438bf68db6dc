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
// variation: a counter per outcome class (2xx, 3xx, 4xx, 5xx, other, aborted:
// plugin.NumClasses, in its order), then the latency histogram.
#define ALLOT_OUTCOME_IDS 7
#define ALLOT_CLASS_OTHER 4
#define ALLOT_CLASS_ABORTED 5

typedef struct {
  uintptr_t config;  // the configuration's handle
  // header is a response header to add, name then value back to back
  // (malloc'd; NULL: none).
  char* header;
  size_t name_length, value_length;
  // outcomes are the stat ids of the observed variations the request was
  // assigned, ALLOT_OUTCOME_IDS each (ids, or malloc'd when more than room
  // variations; NULL: none), n_outcomes their number; start_ns the
  // monotonic clock at the request headers; envoy_config Envoy's side of
  // the configuration, whose counters a stream that ends without response
  // headers counts in.
  size_t* outcomes;
  size_t n_outcomes;
  int64_t start_ns;
  uintptr_t envoy_config;
  // await_body is set while the request's body goes to Go (its request
  // hook answered AwaitBody: allot_stream_await_body), and cleared by the
  // body hook (hooks.c) once Go no longer buffers it.
  bool await_body;
  // room is how many variations' ids fit in ids, allocated with the stream:
  // its configuration's observed experiments (a request is assigned one
  // variation of each), so that observing copies and allocates nothing.
  size_t room;
  size_t ids[];
} allot_stream;

// ALLOT_STREAM_MAX_ROOM bounds a stream's own room for outcome ids, in
// variations (a configuration has at most 0xffff experiments); more goes
// to malloc at each observe.
#define ALLOT_STREAM_MAX_ROOM 0xffff

// allot_stream_new allocates a stream of configuration handle config with
// room for room observed variations' ids (bounded by
// ALLOT_STREAM_MAX_ROOM); NULL on no memory. The ids' room is not zeroed:
// nothing reads it before an observe writes it.
static inline allot_stream* allot_stream_new(uintptr_t config, size_t room) {
  if (room > ALLOT_STREAM_MAX_ROOM) room = 0;
  allot_stream* s = malloc(sizeof(allot_stream) + room * ALLOT_OUTCOME_IDS * sizeof(size_t));
  if (s == NULL) return NULL;
  memset(s, 0, sizeof(*s));
  s->config = config;
  s->room = room;
  return s;
}

// allot_stream_drop_outcomes forgets the stream's outcome ids.
static inline void allot_stream_drop_outcomes(allot_stream* s) {
  if (s->outcomes != s->ids) free(s->outcomes);
  s->outcomes = NULL;
  s->n_outcomes = 0;
}

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
// clock: into the stream's own room when they fit (no allocation), else a
// malloc'd copy; false if there is no memory (the stream keeps what it
// had).
static inline bool allot_stream_observe(uintptr_t stream, uintptr_t envoy_config, const size_t* ids, size_t n) {
  allot_stream* s = (allot_stream*)stream;
  size_t* o = n <= s->room ? s->ids : malloc(n * ALLOT_OUTCOME_IDS * sizeof(size_t));
  if (o == NULL) return false;
  if (s->outcomes != NULL && s->outcomes != s->ids) free(s->outcomes);
  memcpy(o, ids, n * ALLOT_OUTCOME_IDS * sizeof(size_t));
  s->outcomes = o;
  s->n_outcomes = n;
  s->envoy_config = envoy_config;
  s->start_ns = allot_now_ns();
  return true;
}

// allot_stream_await_body sends the stream's request body, as it arrives,
// to Go (the body hook, hooks.c); false if the stream has no state (0).
static inline bool allot_stream_await_body(uintptr_t stream) {
  if (stream == 0 || (stream & 1)) return false;
  ((allot_stream*)stream)->await_body = true;
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
