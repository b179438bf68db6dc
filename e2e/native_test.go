//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// nativeConfig has one experiment on every unit and one targeted by the
// client's address, read through Envoy's source.address attribute.
const nativeConfig = `{"version":"n1","attributes":[{"name":"ip","property":"source.address"}],` +
	`"experiments":[{"key":"split","variations":["control","treatment"],"weights":[0.5,0.5]},` +
	`{"key":"local","variations":["off","on"],"weights":[0,1],"condition":{"ip":{"$regex":"^127\\.0\\.0\\.1:"}}}]}`

// startStaticNative runs Envoy with the native module built with tags, as
// artifact a (one of nativeArtifacts: its warm path on or off), configured
// statically with config.
func startStaticNative(t *testing.T, a artifact, config string, tags ...string) *proxy {
	t.Helper()
	so := harness.MustBuildNative(t, "./filter/native", "liballot.so", tags...)
	return startNativeBootstrap(t, "e2e/testdata/native-static.yaml", a.env(), map[string]string{
		"bin/liballot.so": so,
		"FILTER_CONFIG":   strings.ReplaceAll(config, "'", "''"),
	})
}

// startNativeBootstrap runs Envoy (two workers) with the bootstrap at path
// in front of a fresh echo upstream: its listener, admin and upstream
// ports (10000, 9901, 8081) moved to free ones, and replace's other
// replacements made, and env added to its environment (artifact.env).
// Files it logs to are flushed every 100 ms.
func startNativeBootstrap(t *testing.T, path string, env []string, replace map[string]string) *proxy {
	t.Helper()
	echo := harness.MustStartEcho(t)
	_, echoPort, _ := splitHostPort(echo)
	listen, admin := harness.MustFreePort(t), harness.MustFreePort(t)
	r := map[string]string{
		"port_value: 10000": fmt.Sprintf("port_value: %d", listen),
		"port_value: 9901":  fmt.Sprintf("port_value: %d", admin),
		"port_value: 8081":  "port_value: " + echoPort,
	}
	maps.Copy(r, replace)
	boot := harness.MustRenderBootstrap(t, path, r)
	e := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{Bootstrap: boot, AdminPort: admin, Concurrency: 2, Env: env,
		ExtraArgs: []string{"--file-flush-interval-msec", "100"}}) // a bootstrap's access log, if any, within 100 ms
	return &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen)}
}

// TestNativeAttributesAndExposure: the native module reads an Envoy
// attribute (source.address) through the dynamic-modules ABI and assigns
// as the engine does.
func TestNativeAttributes(t *testing.T) {
	p := startStaticNative(t, nativeArtifact, nativeConfig)
	r, err := p.get(map[string][]string{"x-user-id": {"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Header("x-experiment-local"); len(v) != 1 || v[0] != "on" {
		t.Errorf("x-experiment-local = %q, want [on] (source.address read through the ABI)", v)
	}
	if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != "n1" {
		t.Errorf("x-experiments-version = %q, want [n1]", v)
	}
}

// TestNativePanicRecovered proves against real Envoy that a panic in the
// native module's request hook is recovered: Envoy keeps serving, the
// request passes without assignment headers, forged ones removed, and the
// failure is counted. The allotfault build panics in the host call the
// request's x-allot-test-fault header names.
func TestNativePanicRecovered(t *testing.T) {
	p := startStaticNative(t, nativeArtifact, nativeConfig, "allotfault")
	many := manyForged()
	cases := []struct {
		call   string
		forged map[string][]string
	}{
		{"read", map[string][]string{"x-experiment-split": {"forged"}}},
		{"remove", map[string][]string{"x-experiment-split": {"forged"}, "X-Experiments": {"forged"}}},
		{"add", map[string][]string{"x-experiments-version": {"forged"}}},
		{"set", many},
		{"property", map[string][]string{"x-experiment-local": {"forged"}}},
		{"state", map[string][]string{"x-experiment-split": {"forged"}}},
	}
	for _, tc := range cases {
		t.Run(tc.call, func(t *testing.T) {
			h := map[string][]string{"x-user-id": {"u-" + tc.call}, "x-allot-test-fault": {tc.call}}
			for k, v := range tc.forged {
				h[k] = v
			}
			r, err := p.get(h)
			if err != nil {
				t.Fatalf("request with a panic in %s: %v", tc.call, err)
			}
			for name, vals := range r.Headers {
				n := strings.ToLower(name)
				if strings.HasPrefix(n, "x-experiment") {
					t.Errorf("panic in %s: the upstream got %s: %q, want no assignment header", tc.call, name, vals)
				}
			}
			// The worker serves the next request normally.
			r, err = p.get(map[string][]string{"x-user-id": {"u-" + tc.call}})
			if err != nil {
				t.Fatal(err)
			}
			if v := r.Header("x-experiment-local"); len(v) != 1 || v[0] != "on" {
				t.Errorf("after a panic in %s: x-experiment-local = %q, want [on]", tc.call, v)
			}
		})
	}
	harness.MustEventually(t, 5*time.Second, func() error {
		s := p.MustStats(t)
		if got, want := s["wasmcustom."+wire.MetricFailOpen], int64(len(cases)); got != want {
			return fmt.Errorf("fail_open %d, want %d (one per injected panic)", got, want)
		}
		if got, want := s["wasmcustom."+wire.MetricEvaluated], int64(len(cases)); got != want {
			return fmt.Errorf("requests_evaluated %d, want %d", got, want)
		}
		return nil
	})
	if p.Process.Exited() {
		t.Fatal("envoy exited")
	}
}

// manyForged is 45 forged assignment headers: more names than the filter
// removes one call each (40), so it removes them with one map rewrite.
func manyForged() map[string][]string {
	many := map[string][]string{}
	for i := range 45 {
		many[fmt.Sprintf("x-experiment-forged-%d", i)] = []string{"forged"}
	}
	return many
}
