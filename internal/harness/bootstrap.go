package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// RenderBootstrap reads the bootstrap at path, replaces every key of
// replace with its value (literally, in one pass, longer keys first where
// keys overlap), writes the result into dir under the same base name and
// returns the new path. It moves fixed ports and paths to per-run values,
// e.g.
//
//	harness.RenderBootstrap("envoy-configs/sidecar.yaml", map[string]string{
//		"port_value: 10000": fmt.Sprintf("port_value: %d", port),
//	}, dir)
//
// A relative path is taken from the repository root. It returns an error
// if any key does not occur in the file, so a renamed knob cannot be
// silently missed.
func RenderBootstrap(path string, replace map[string]string, dir string) (string, error) {
	if !filepath.IsAbs(path) {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		path = filepath.Join(root, path)
	}
	in, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("render bootstrap: %w", err)
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
		return "", fmt.Errorf("render bootstrap %s: keys not found: %q", path, missing)
	}
	out := strings.NewReplacer(pairs...).Replace(text)

	dst := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(dst, []byte(out), 0o644); err != nil {
		return "", fmt.Errorf("render bootstrap: %w", err)
	}
	return dst, nil
}

// MustRenderBootstrap is RenderBootstrap into a temporary directory of the
// test, failing the test on error.
func MustRenderBootstrap(t testing.TB, path string, replace map[string]string) string {
	t.Helper()
	return must[string](t)(RenderBootstrap(path, replace, t.TempDir()))
}
