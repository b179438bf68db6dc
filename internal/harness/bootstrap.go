package harness

import (
	"fmt"
	"maps"
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

// ConfigBootstrap is a bootstrap of envoy-configs/ moved to a run's ports
// and paths: the fixed listener (10000), admin (9901) and xDS (18000)
// ports, the filter module's path and the access log.
type ConfigBootstrap struct {
	// Path is the bootstrap, e.g. "envoy-configs/sidecar.yaml" (a relative
	// path is taken from the repository root).
	Path string
	// Listener, Admin and XDS replace the ports 10000, 9901 and 18000; 0
	// lets the kernel choose (see EnvoyOptions.AdminPort, Envoy.Listener).
	Listener, Admin, XDS int
	// Module replaces the filter module's path: bin/allot.wasm, or
	// bin/liballot.so when Module ends in ".so".
	Module string
	// AccessLog replaces /dev/stdout.
	AccessLog string
	// Replace moves the rest, and overrides the replacements above for
	// the same key.
	Replace map[string]string
}

// Render writes the bootstrap into dir (RenderBootstrap) and returns its
// path.
func (c ConfigBootstrap) Render(dir string) (string, error) {
	module := "bin/allot.wasm"
	if strings.HasSuffix(c.Module, ".so") {
		module = "bin/liballot.so"
	}
	r := map[string]string{
		"port_value: 10000": fmt.Sprintf("port_value: %d", c.Listener),
		"port_value: 9901":  fmt.Sprintf("port_value: %d", c.Admin),
		"port_value: 18000": fmt.Sprintf("port_value: %d", c.XDS),
		module:              c.Module,
		"/dev/stdout":       c.AccessLog,
	}
	maps.Copy(r, c.Replace)
	return RenderBootstrap(c.Path, r, dir)
}

// MustRender is Render into a temporary directory of the test, failing
// the test on error.
func (c ConfigBootstrap) MustRender(t testing.TB) string {
	t.Helper()
	return must[string](t)(c.Render(t.TempDir()))
}
