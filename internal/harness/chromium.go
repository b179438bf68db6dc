package harness

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// chromiumNames are the executables ChromiumBinary looks for on PATH:
// Debian's chromium package first.
var chromiumNames = []string{"chromium", "chromium-browser"}

// ChromiumBinary returns the Chromium the web console's tests drive:
// $CHROME_BIN if set, else the first of chromium (Debian's package) and
// chromium-browser on PATH, or an error naming how to install one. `make
// chromium` installs Debian's package (`make test` does it first).
func ChromiumBinary() (string, error) {
	if bin := os.Getenv("CHROME_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("chromium from $CHROME_BIN not found: %w\nunset CHROME_BIN or point it at Chromium", err)
		}
		return bin, nil
	}
	for _, name := range chromiumNames {
		if bin, err := exec.LookPath(name); err == nil {
			return bin, nil
		}
	}
	return "", fmt.Errorf("no Chromium on PATH (looked for %v) and $CHROME_BIN is unset\n"+
		"run `make chromium` (or `make test`, which installs Debian's chromium package), or set CHROME_BIN", chromiumNames)
}

// MustChromiumBinary is ChromiumBinary that fails the test — never skips
// it: CI must not pass by running no browser test.
func MustChromiumBinary(t testing.TB) string {
	t.Helper()
	return must[string](t)(ChromiumBinary())
}
