//go:build cgo && allotfault

package dynmod

import (
	"os"
	"strings"
)

// UnresolvedEnv is the environment variable that, in the allotfault build
// only, names callbacks (comma-separated) the module treats as unresolved
// besides those that are: the e2e tests use it to show against real Envoy,
// which always has them all, that a missing callback is refused.
const UnresolvedEnv = "ALLOT_TEST_UNRESOLVED"

func init() {
	v := os.Getenv(UnresolvedEnv)
	if v == "" {
		return
	}
	also := strings.Split(v, ",")
	unresolved = func() []string { return append(unresolvedCallbacks(), also...) }
}
