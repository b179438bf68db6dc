// The table of the callbacks into Envoy that the module calls, made from
// ALLOT_CALLBACKS (callbacks.h): each one's name and address, NULL if it
// did not resolve.

#define _GNU_SOURCE // RTLD_DEFAULT

#include <dlfcn.h>

#include "callbacks.h"

typedef struct {
  const char* name;
  void (*address)(void);
  bool reply;  // ALLOT_REPLY_CALLBACKS
} allot_callback;

#define ALLOT_CALLBACK_ENTRY(ret, name, params) {#name, (void (*)(void))name, false},
#define ALLOT_REPLY_CALLBACK_ENTRY(ret, name, params) {#name, (void (*)(void))name, true},
static const allot_callback allot_callbacks[] = {ALLOT_CALLBACKS(ALLOT_CALLBACK_ENTRY)
                                                     ALLOT_REPLY_CALLBACKS(ALLOT_REPLY_CALLBACK_ENTRY)};
#undef ALLOT_CALLBACK_ENTRY
#undef ALLOT_REPLY_CALLBACK_ENTRY

size_t allot_callback_count(void) { return sizeof(allot_callbacks) / sizeof(allot_callbacks[0]); }

const char* allot_callback_name(size_t i) { return i < allot_callback_count() ? allot_callbacks[i].name : NULL; }

bool allot_callback_reply(size_t i) { return i < allot_callback_count() && allot_callbacks[i].reply; }

bool allot_callback_resolved(size_t i) { return i < allot_callback_count() && allot_callbacks[i].address != NULL; }

// allot_envoy_exports reports whether the process the module runs in
// exports a symbol of that name (Envoy exports every callback of its ABI):
// a lookup by name, never a call.
bool allot_envoy_exports(const char* name) { return dlsym(RTLD_DEFAULT, name) != NULL; }
