package harness

import (
	"os"
	"os/exec"
	"testing"
)

// chromiumNames are the executables ChromiumBinary looks for on PATH:
// Debian's chromium package first.
var chromiumNames = []string{"chromium", "chromium-browser"}

// ChromiumBinary returns the Chromium the web console's tests drive:
// $CHROME_BIN if set, else the first of chromium (Debian's package) and
// chromium-browser on PATH. The test fails, and is never skipped, when there
// is none: CI must not pass by running no browser test. `make chromium`
// installs Debian's package (`make test` does it first).
func ChromiumBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("CHROME_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("chromium from $CHROME_BIN not found: %v\nunset CHROME_BIN or point it at Chromium", err)
		}
		return bin
	}
	for _, name := range chromiumNames {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	t.Fatalf("no Chromium on PATH (looked for %v) and $CHROME_BIN is unset\n"+
		"run `make chromium` (or `make test`, which installs Debian's chromium package), or set CHROME_BIN", chromiumNames)
	return ""
}
