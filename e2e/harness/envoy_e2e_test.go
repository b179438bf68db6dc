//go:build e2e

package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartEnvoyFailsFastOnBadBootstrap needs real Envoy, hence the e2e tag;
// it lives here to use this package's fakeTB.
func TestStartEnvoyFailsFastOnBadBootstrap(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("static_resources: {clusters: [{name: x, type: NOPE}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fatal := capture(t, func(tb testing.TB) {
		StartEnvoy(tb, EnvoyOptions{Bootstrap: bad})
	})
	if !strings.Contains(fatal, "exited before ready") {
		t.Errorf("fatal = %q, want an early-exit failure", fatal)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v to notice the exit; want well under the 30 s ready deadline", d)
	}
}
