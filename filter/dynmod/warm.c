// The request-headers hook: the warm path in C (wserve.c), Go for
// everything else (docs/perf/native-warm-path.md). Any request the warm
// path does not serve, and one whose add Envoy refuses, enters Go
// (allot_go_request_headers, exports.go), which runs as it always did: C's
// partial adds carry names the filter owns, so Go removes them first, as
// it removes forged ones.

#include <stdbool.h>
#include <stdint.h>

#include "_cgo_export.h"
#include "wcache.h"

// A stream whose module value is 0 (no state could be allocated) is
// Go's, which passes it through; so is every stream of a Handler whose
// handles are not allot_wconfig addresses.
int32_t envoy_dynamic_module_on_http_filter_request_headers(uintptr_t f, uintptr_t m, bool eos) {
  if (allot_warm_serve(f, m)) return 0;
  return allot_go_request_headers(f, m, eos);
}
