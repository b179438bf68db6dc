// replyhost stands in for Envoy running a module's local reply: it dlopens
// the .so named by argv[1] (testdata/replymod), makes a configuration,
// then runs streams through the request hooks as Envoy does, over fake
// callbacks: each request's headers, its body in parts (the part each body
// hook received and what Envoy buffered before it), and the reply the
// module sends, printed as Envoy receives it (status, headers, body) with
// each hook's status. The other callbacks the module imports are stubs in
// a file the test writes beside it.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "load.h"

typedef struct {
  const char* key_ptr;
  size_t key_length;
  const char* value_ptr;
  size_t value_length;
} header;

// The stream's request headers; its body: the received part and the
// buffered body, in chunks.
static header req[2] = {{":method", 7, "POST", 4}, {":path", 5, "", 0}};
static buffer received[40], buffered[40];
static size_t n_received, n_buffered;

size_t envoy_dynamic_module_callback_http_get_headers_size(uintptr_t f, int32_t type) { return type == 0 ? 2 : 0; }

bool envoy_dynamic_module_callback_http_get_headers(uintptr_t f, int32_t type, header* out) {
  if (type != 0) return false;
  memcpy(out, req, sizeof req);
  return true;
}

size_t envoy_dynamic_module_callback_http_get_body_chunks_size(uintptr_t f, int32_t type) {
  return type == 0 ? n_received : type == 1 ? n_buffered : 0;
}

bool envoy_dynamic_module_callback_http_get_body_chunks(uintptr_t f, int32_t type, buffer* out) {
  if (type > 1) return false;
  memcpy(out, type == 0 ? received : buffered, (type == 0 ? n_received : n_buffered) * sizeof(buffer));
  return true;
}

bool envoy_dynamic_module_callback_http_received_buffered_request_body(uintptr_t f) { return false; }

void envoy_dynamic_module_callback_http_send_response(uintptr_t f, uint32_t status, header* h, size_t n, buffer body,
                                                      buffer details) {
  printf("  reply %u\n", status);
  for (size_t i = 0; i < n; i++) {
    printf("  %.*s: %.*s\n", (int)h[i].key_length, h[i].key_ptr, (int)h[i].value_length, h[i].value_ptr);
  }
  printf("  %.*s\n", (int)(body.length > 64 ? 64 : body.length), body.ptr);
}

typedef int32_t (*body_hook)(uintptr_t, uintptr_t, bool);
static body_hook on_headers, on_body;
static int32_t (*on_trailers)(uintptr_t, uintptr_t);
static uintptr_t (*filter_new)(uintptr_t, uintptr_t);
static void (*filter_destroy)(uintptr_t);

// stream runs one request of path through the hooks: its body in parts
// (NULL-terminated; each part a chunk or, for "*N", N one-byte chunks),
// Envoy buffering each part the body hook asks it to; trailers at the end
// if asked.
static void stream(uintptr_t config, const char* path, const char** parts, bool trailers) {
  const uintptr_t f = 0xf17e;
  req[1].value_ptr = path;
  req[1].value_length = strlen(path);
  n_received = n_buffered = 0;
  printf("%s\n", path);
  uintptr_t m = filter_new(config, f);
  printf("  headers %d\n", on_headers(f, m, parts == NULL || parts[0] == NULL));
  fflush(stdout);
  for (size_t i = 0; parts != NULL && parts[i] != NULL; i++) {
    n_received = 0;
    if (parts[i][0] == '*') {
      for (int k = 0; k < parts[i][1] - '0' && k < 40; k++) received[n_received++] = (buffer){"x", 1};
    } else {
      received[n_received++] = (buffer){parts[i], strlen(parts[i])};
    }
    bool last = parts[i + 1] == NULL && !trailers;
    int32_t s = on_body(f, m, last);
    printf("  body %d\n", s);
    fflush(stdout);
    if (s == 1) {  // StopIterationAndBuffer: Envoy keeps the part
      for (size_t k = 0; k < n_received; k++) buffered[n_buffered++] = received[k];
    }
  }
  n_received = 0;
  if (trailers) printf("  trailers %d\n", on_trailers(f, m));
  filter_destroy(m);
  fflush(stdout);
}

int main(int argc, char** argv) {
  program_init_hook init;
  config_new_hook config_new;
  void* h = load(argv[1], &init, &config_new);
  if (h == NULL) return 2;
  on_headers = (body_hook)dlsym(h, "envoy_dynamic_module_on_http_filter_request_headers");
  on_body = (body_hook)dlsym(h, "envoy_dynamic_module_on_http_filter_request_body");
  on_trailers = (int32_t(*)(uintptr_t, uintptr_t))dlsym(h, "envoy_dynamic_module_on_http_filter_request_trailers");
  filter_new = (uintptr_t(*)(uintptr_t, uintptr_t))dlsym(h, "envoy_dynamic_module_on_http_filter_new");
  filter_destroy = (void (*)(uintptr_t))dlsym(h, "envoy_dynamic_module_on_http_filter_destroy");
  init();
  uintptr_t c = config_new(0x1000, (buffer){"x", 1}, (buffer){"", 0});
  printf("config_new: %s\n", c != 0 ? "accepted" : "refused");
  const char* json[] = {"{\"con", "text\":", "{}}", NULL};
  const char* many[] = {"*9", "*9", "*9", "*9", NULL};
  const char* none[] = {NULL};
  stream(c, "/other", json, false);
  stream(c, "/answer/json", json, false);
  stream(c, "/answer/many", many, false);
  stream(c, "/answer/now", json, false);
  stream(c, "/answer/empty", none, false);
  stream(c, "/answer/trailers", json, true);
  return 0;
}
