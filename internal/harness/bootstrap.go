package harness

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// RenderBootstrap reads the bootstrap YAML at path, replaces every key of
// replace with its value (literally, in one pass, longer keys first where keys
// overlap), writes the result into a temporary directory and returns the new
// path. It moves fixed ports and paths to per-test values, e.g.
//
//	harness.RenderBootstrap(t, "envoy-configs/sidecar.yaml", map[string]string{
//		"port_value: 10000": fmt.Sprintf("port_value: %d", harness.FreePort(t)),
//	})
//
// A relative path is taken from the repository root. The test fails if any
// key does not occur in the file, so a renamed knob cannot be silently missed.
func RenderBootstrap(t testing.TB, path string, replace map[string]string) string {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(repoRoot(t), path)
	}
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("render bootstrap: %v", err)
	}
	text := string(in)

	keys := make([]string, 0, len(replace))
	for k := range replace {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	var missing []string
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		if k == "" || !strings.Contains(text, k) {
			missing = append(missing, k)
			continue
		}
		pairs = append(pairs, k, replace[k])
	}
	if len(missing) > 0 {
		t.Fatalf("render bootstrap %s: keys not found: %q", path, missing)
	}
	out := strings.NewReplacer(pairs...).Replace(text)

	dst := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(dst, []byte(out), 0o644); err != nil {
		t.Fatalf("render bootstrap: %v", err)
	}
	return dst
}
