// The hosts' common start, as Envoy loads a module: the ABI's buffer, the
// module dlopened, its program-init and config-new hooks found.

#ifndef ALLOT_TESTDATA_LOAD_H
#define ALLOT_TESTDATA_LOAD_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  const char* ptr;
  size_t length;
} buffer;

typedef const char* (*program_init_hook)(void);
typedef uintptr_t (*config_new_hook)(uintptr_t, buffer, buffer);

// load dlopens module as Envoy does and finds its program-init and
// config-new hooks; NULL, said on standard output, if either fails.
static void* load(const char* module, program_init_hook* init, config_new_hook* config_new) {
  void* h = dlopen(module, RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) {
    printf("dlopen: %s\n", dlerror());
    return NULL;
  }
  *init = (program_init_hook)dlsym(h, "envoy_dynamic_module_on_program_init");
  *config_new = (config_new_hook)dlsym(h, "envoy_dynamic_module_on_http_filter_config_new");
  if (*init == NULL || *config_new == NULL) {
    printf("dlsym: a hook is missing\n");
    return NULL;
  }
  return h;
}

#endif
