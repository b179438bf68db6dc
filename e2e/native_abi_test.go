//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// unresolvedEnv is dynmod.UnresolvedEnv: in the allotfault build, the
// callbacks the module treats as unresolved although Envoy has them.
const unresolvedEnv = "ALLOT_TEST_UNRESOLVED"

// writeECDS replaces the ECDS file at path with the allot filter running
// the module so with config, atomically (Envoy watches the file's moves).
func writeECDS(t *testing.T, path, so, config string) {
	t.Helper()
	doc := fmt.Sprintf(`resources:
- "@type": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig
  name: allot
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
    dynamic_module_config:
      module: {local: {filename: %s}}
      do_not_close: true
      metrics_namespace: wasmcustom
    filter_name: allot
    filter_config:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: '%s'
`, so, strings.ReplaceAll(config, "'", "''"))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestNativeMissingCallbackRefused runs real Envoy with the native module
// told (allotfault build, ALLOT_TEST_UNRESOLVED) that one callback into
// Envoy did not resolve, as in an Envoy of another ABI, and pushes it two
// configurations over ECDS: the first loads the module (program-init),
// the second finds it loaded (Envoy skips program-init). Each is refused
// (Envoy counts a rejected update) with a critical log naming the callback
// and the module's ABI, and Envoy keeps running. With every callback
// resolved, the same pushes are accepted and requests are assigned.
func TestNativeMissingCallbackRefused(t *testing.T) {
	const missing = "envoy_dynamic_module_callback_http_clear_route_cache"
	so := harness.MustBuildNative(t, "./filter/native", "liballot.so", "allotfault")
	for _, tc := range []struct {
		name       string
		unresolved string
	}{
		{"all resolved", ""},
		{"clear_route_cache missing", missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(unresolvedEnv, tc.unresolved) // Envoy inherits it
			ecds := filepath.Join(t.TempDir(), "allot-ecds.yaml")
			writeECDS(t, ecds, so, `{"version":"e1","experiments":[{"key":"split","variations":["a","b"],"weights":[0.5,0.5]}]}`)
			p := startNativeBootstrap(t, "e2e/testdata/native-ecds-file.yaml", nativeArtifact.env(), map[string]string{"ECDS_PATH": ecds})
			e := p.Envoy
			const reloads, fails = "extension_config_discovery.http_filter.allot.update_success",
				"extension_config_discovery.http_filter.allot.update_rejected"
			for i, version := range []string{"e1", "e2"} {
				if i > 0 {
					writeECDS(t, ecds, so, `{"version":"`+version+`","experiments":[{"key":"split","variations":["a","b"],"weights":[0.5,0.5]}]}`)
				}
				harness.MustEventually(t, 10*time.Second, func() error {
					s := e.MustStats(t)
					if tc.unresolved == "" && s[reloads] != int64(i+1) {
						return fmt.Errorf("%s = %d, want %d (%s accepted)", reloads, s[reloads], i+1, version)
					}
					if tc.unresolved != "" && s[fails] != int64(i+1) {
						return fmt.Errorf("%s = %d, want %d (%s refused)", fails, s[fails], i+1, version)
					}
					return nil
				})
			}
			if e.Exited() {
				t.Fatalf("envoy exited:\n%s", e.LogTail(30))
			}
			refusals := 0
			for _, line := range strings.Split(e.MustLog(t), "\n") {
				if strings.Contains(line, "[critical]") && strings.Contains(line, "allot: configuration rejected: ") &&
					strings.Contains(line, missing) && strings.Contains(line, "ABI v0.2.0") {
					refusals++
				}
			}
			if tc.unresolved == "" {
				if refusals != 0 || e.MustStats(t)[fails] != 0 {
					t.Errorf("every callback resolved: %d refusals logged, %s = %d; want none", refusals, fails, e.MustStats(t)[fails])
				}
				r, err := p.get(map[string][]string{"x-user-id": {"alice"}})
				if err != nil {
					t.Fatal(err)
				}
				if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != "e2" {
					t.Errorf("x-experiments-version = %q, want [e2] (the second push applied)", v)
				}
				return
			}
			if refusals != 2 {
				t.Errorf("%d critical refusals naming %s and ABI v0.2.0 logged, want 2 (one per push)\n%s", refusals, missing, e.LogTail(30))
			}
			if s := e.MustStats(t); s[reloads] != 0 {
				t.Errorf("%s = %d, want 0: a configuration was accepted without %s", reloads, s[reloads], missing)
			}
		})
	}
}
