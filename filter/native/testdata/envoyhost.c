// envoyhost stands in for Envoy loading the module: it dlopens the .so named
// by argv[1] as Envoy does, calls program-init, then config-new with the
// configuration argv[2] (as Envoy does for a configuration even after
// program-init refused: the module stays loaded, and a later load finds it
// resident and skips program-init), and prints what each returned. The
// callbacks it exports (-rdynamic) are in a file the test writes beside it:
// every callback the module uses but one, to show the module refuses
// instead of calling the missing one.

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "load.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: envoyhost module.so config\n");
    return 2;
  }
  program_init_hook init;
  config_new_hook config_new;
  if (load(argv[1], &init, &config_new) == NULL) return 2;
  const char* v = init();
  printf("program_init: %s\n", v != NULL ? v : "NULL");
  fflush(stdout);
  buffer name = {"allot", 5}, config = {argv[2], strlen(argv[2])};
  uintptr_t c = config_new(0x1000, name, config);
  printf("config_new: %s\n", c != 0 ? "accepted" : "refused");
  fflush(stdout);
  return 0;
}
