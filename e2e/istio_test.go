//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/allotmesh/allot/internal/harness"
)

// Istio's names for a sidecar of app "shop" in namespace "default": the node
// id pilot-agent writes and the cluster it derives (<app>.<namespace>).
const (
	istioNode    = "sidecar~127.0.0.1~shop-1.default~default.svc.cluster.local"
	istioCluster = "shop.default"
)

// TestIstioManifests runs what deploy/istio installs in a sidecar — the
// EnvoyFilter's SIDECAR_INBOUND patches applied to an inbound HTTP
// connection manager as istiod applies them, and the bootstrap override
// passed with --config-yaml as pilot-agent passes it — in Envoy, against
// allotd, for both artifacts. It stands in for a test with istiod, which no
// served istio.io/istio version starts without a Kubernetes cluster
// (deploy/istio/README.md): the Istio parts it does not run are istiod's
// patching and pilot-agent's own bootstrap.
func TestIstioManifests(t *testing.T) {
	forEachArtifact(t, []artifact{wasmArtifact, nativeArtifact}, testIstioManifests)
}

func testIstioManifests(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	envoyFilter, override := "deploy/istio/envoyfilter-ecds.yaml", "deploy/istio/bootstrap-override.yaml"
	module := "/etc/allot/plugin.wasm"
	if a.native {
		envoyFilter, override = "deploy/istio/envoyfilter-ecds-native.yaml", "deploy/istio/bootstrap-override-native.yaml"
		module = "/etc/allot/liballot.so"
	}
	filters := inboundFilters(t, envoyFilter, []any{router})
	if names := filterNames(filters); !slices.Equal(names, []string{"allot.strip_forged", "allot", "envoy.filters.http.router"}) {
		t.Fatalf("inbound http_filters %v, want the strip filter, allot, then the router", names)
	}

	listen, admin := harness.MustFreePort(t), harness.MustFreePort(t)
	// The module where allotd's configurations and default_config name it.
	bootstrap := strings.ReplaceAll(inboundBootstrap(t, listen, admin, s.echoAddr, filters), module, s.filter())
	bootstrap = harness.MustWriteFile(t, "istio-bootstrap.yaml", bootstrap)
	extra := overrideJSON(t, override, s.xdsPort)

	e := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{Bootstrap: bootstrap, AdminPort: admin, Name: "envoy-istio",
		Node: istioNode, Cluster: istioCluster, Env: a.env(), ExtraArgs: []string{"--config-yaml", extra}})
	p := &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen), Node: istioNode}

	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "split", "variations": []string{"control", "treatment"}, "weights": []float64{0.5, 0.5}}, nil)
	waitAssigned(t, p, "probe", "x-experiment-split")

	t.Run("assignments reach the service, forged headers do not", func(t *testing.T) {
		r, err := p.get(map[string][]string{
			"x-user-id":             {"alice"},
			"x-experiment-split":    {"forged"},
			"x-experiment-absent":   {"forged"},
			"x-experiments":         {"split=forged"},
			"x-experiments-version": {"forged"},
			"x-experimental-flag":   {"kept"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := r.Header("x-experiment-split"); len(v) != 1 || (v[0] != "control" && v[0] != "treatment") {
			t.Errorf("x-experiment-split = %q, want Allot's assignment", v)
		}
		if v := r.Header("x-experiment-absent"); len(v) != 0 {
			t.Errorf("x-experiment-absent = %q reached the service", v)
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || len(v[0]) != 16 {
			t.Errorf("x-experiments-version = %q, want allotd's 16-hex-digit version", v)
		}
		if v := r.Header("x-experimental-flag"); len(v) != 1 || v[0] != "kept" {
			t.Errorf("x-experimental-flag = %q, want [kept]: not a header Allot owns", v)
		}
	})

	t.Run("a waited write is applied, outcomes reach allotd over the override's stat sink", func(t *testing.T) {
		createSunk(t, s, 1)
		sent := map[string]int64{}
		for i := range 60 {
			r, err := p.get(map[string][]string{"x-user-id": {fmt.Sprintf("istio-unit-%d", i)}})
			if err != nil {
				t.Fatal(err)
			}
			v := r.Header("x-experiment-sunk")
			if len(v) != 1 {
				t.Fatalf("x-experiment-sunk = %q, want one value", v)
			}
			sent[v[0]]++
		}
		wantCounts(t, s, sent, map[string]int64{})
	})

	t.Run("allotd lists the proxy as applied", func(t *testing.T) {
		harness.MustEventually(t, 15*time.Second, func() error {
			var status rolloutJSON
			if code := s.api("GET", "/v1/rollout", nil, &status); code != http.StatusOK {
				return fmt.Errorf("GET /v1/rollout: status %d", code)
			}
			for _, px := range status.Proxies {
				if px.NodeID != istioNode {
					continue
				}
				if px.Cluster != istioCluster || px.State != "applied" || px.AckedVersion == "" || px.AckedVersion != px.TargetVersion {
					return fmt.Errorf("proxy %+v, want cluster %s applied at its target version", px, istioCluster)
				}
				return nil
			}
			return fmt.Errorf("allotd does not list %s", istioNode)
		})
	})
}

// inboundBootstrap is a bootstrap with Envoy's admin on 127.0.0.1:admin and
// one listener on 127.0.0.1:listen whose HTTP connection manager runs
// filters and routes to the echo upstream at echoAddr, named as istiod names
// a sidecar's inbound pieces.
func inboundBootstrap(t *testing.T, listen, admin int, echoAddr string, filters []any) string {
	t.Helper()
	_, echoPort, _ := splitHostPort(echoAddr)
	echo, err := strconv.Atoi(echoPort)
	if err != nil {
		t.Fatal(err)
	}
	boot := map[string]any{
		"admin": map[string]any{"address": socketAddress(admin)},
		"static_resources": map[string]any{
			"listeners": []any{map[string]any{
				"name":    "virtualInbound",
				"address": socketAddress(listen),
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
					"name": "envoy.filters.network.http_connection_manager",
					"typed_config": map[string]any{
						"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
						"stat_prefix": "inbound_0.0.0.0_8080",
						"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
							"name": "inbound|http|8080", "domains": []string{"*"},
							"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"},
								"route": map[string]any{"cluster": "inbound|8080||"}}},
						}}},
						"http_filters": filters,
					},
				}}}},
			}},
			"clusters": []any{map[string]any{
				"name": "inbound|8080||", "type": "STATIC", "connect_timeout": "1s",
				"load_assignment": map[string]any{"cluster_name": "inbound|8080||", "endpoints": []any{map[string]any{
					"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": socketAddress(echo)}}}}}},
			}},
		},
	}
	b, err := json.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// router is the router filter, last in every chain.
var router = map[string]any{"name": "envoy.filters.http.router", "typed_config": map[string]any{
	"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}

// inboundFilters applies the SIDECAR_INBOUND HTTP_FILTER patches of the
// EnvoyFilter at path, in order, to an HTTP connection manager whose
// http_filters are base (istiod's own, ending with the router), as istiod
// does (INSERT_FIRST, INSERT_BEFORE a sub-filter), and returns the resulting
// http_filters.
func inboundFilters(t *testing.T, path string, base []any) []any {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, path))
	if err != nil {
		t.Fatal(err)
	}
	var ef struct {
		Spec struct {
			ConfigPatches []struct {
				ApplyTo string `json:"applyTo"`
				Match   struct {
					Context  string `json:"context"`
					Listener struct {
						FilterChain struct {
							Filter struct {
								Name      string `json:"name"`
								SubFilter struct {
									Name string `json:"name"`
								} `json:"subFilter"`
							} `json:"filter"`
						} `json:"filterChain"`
					} `json:"listener"`
				} `json:"match"`
				Patch struct {
					Operation string         `json:"operation"`
					Value     map[string]any `json:"value"`
				} `json:"patch"`
			} `json:"configPatches"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &ef); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	filters := slices.Clone(base)
	for i, cp := range ef.Spec.ConfigPatches {
		if cp.ApplyTo != "HTTP_FILTER" || cp.Match.Context != "SIDECAR_INBOUND" {
			continue
		}
		if f := cp.Match.Listener.FilterChain.Filter.Name; f != "envoy.filters.network.http_connection_manager" {
			t.Fatalf("%s: configPatches[%d] matches network filter %q", path, i, f)
		}
		switch cp.Patch.Operation {
		case "INSERT_FIRST":
			filters = slices.Insert(filters, 0, any(cp.Patch.Value))
		case "INSERT_BEFORE":
			at := slices.Index(filterNames(filters), cp.Match.Listener.FilterChain.Filter.SubFilter.Name)
			if at < 0 {
				t.Fatalf("%s: configPatches[%d]: no filter %q to insert before", path, i, cp.Match.Listener.FilterChain.Filter.SubFilter.Name)
			}
			filters = slices.Insert(filters, at, any(cp.Patch.Value))
		default:
			t.Fatalf("%s: configPatches[%d]: operation %s is not one this test applies", path, i, cp.Patch.Operation)
		}
	}
	return filters
}

// filterNames lists the names of http_filters.
func filterNames(filters []any) []string {
	var names []string
	for _, f := range filters {
		name, _ := f.(map[string]any)["name"].(string)
		names = append(names, name)
	}
	return names
}

// overrideJSON is the bootstrap override at path as JSON, its allot_xds
// cluster moved to allotd on 127.0.0.1:xdsPort and its stat sink flushing
// every second: what pilot-agent passes to Envoy with --config-yaml.
func overrideJSON(t *testing.T, path string, xdsPort int) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, path))
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{
		"address: allot-xds.allot.svc.cluster.local\n": "address: 127.0.0.1\n",
		"port_value: 18000\n":                          fmt.Sprintf("port_value: %d\n", xdsPort),
	} {
		if strings.Count(string(data), from) != 1 {
			t.Fatalf("%s: want exactly one %q to move", path, from)
		}
		data = []byte(strings.Replace(string(data), from, to, 1))
	}
	for from, to := range sinkEverySecond() {
		if !strings.Contains(string(data), from) {
			t.Fatalf("%s: no %q to replace", path, from)
		}
		data = []byte(strings.ReplaceAll(string(data), from, to))
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(j)
}

// socketAddress is an Envoy address on 127.0.0.1:port.
func socketAddress(port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": port}}
}

// TestIstioStaticPlugin runs the Wasm module as Istio runs
// deploy/istio/trafficextension.yaml and wasmplugin.yaml (istiod's
// translation in pilot/pkg/model/extensions.go: the plugin named
// <namespace>.<name>, root_id the pluginName, pluginConfig as JSON text in
// a StringValue, failStrategy FAIL_OPEN; pilot-agent's fetch of the OCI
// image replaced by the locally built module): the static experiment is
// assigned with the static version, and forged headers are removed.
func TestIstioStaticPlugin(t *testing.T) {
	wasm := harness.MustBuildWasm(t, "./filter")
	for _, tc := range []struct{ file, wasmField string }{
		{"deploy/istio/trafficextension.yaml", "wasm"},
		{"deploy/istio/wasmplugin.yaml", ""},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			data, err := os.ReadFile(repoPath(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				Metadata struct{ Name, Namespace string }
				Spec     map[string]json.RawMessage
			}
			if err := yaml.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			spec := res.Spec
			if tc.wasmField != "" {
				spec = nil
				if err := json.Unmarshal(res.Spec[tc.wasmField], &spec); err != nil {
					t.Fatal(err)
				}
			}
			var pluginName, failStrategy string
			if err := json.Unmarshal(spec["pluginName"], &pluginName); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(spec["failStrategy"], &failStrategy); err != nil || failStrategy != "FAIL_OPEN" {
				t.Fatalf("failStrategy %q (%v), want FAIL_OPEN", failStrategy, err)
			}
			filter := map[string]any{
				"name": res.Metadata.Namespace + "." + res.Metadata.Name,
				"typed_config": map[string]any{
					"@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
					"config": map[string]any{
						"name":    res.Metadata.Namespace + "." + res.Metadata.Name,
						"root_id": pluginName,
						"vm_config": map[string]any{
							"runtime": "envoy.wasm.runtime.v8",
							"code":    map[string]any{"local": map[string]any{"filename": wasm}},
						},
						"configuration": map[string]any{
							"@type": "type.googleapis.com/google.protobuf.StringValue",
							"value": string(spec["pluginConfig"]),
						},
						"failure_policy": failStrategy,
					},
				},
			}
			// deploy/istio/envoyfilter-strip-forged.yaml, which static mode
			// requires, applied after istiod has placed the plugin.
			filters := inboundFilters(t, stripForged, []any{filter, router})
			if names, want := filterNames(filters), []string{"allot.strip_forged", filter["name"].(string), "envoy.filters.http.router"}; !slices.Equal(names, want) {
				t.Fatalf("inbound http_filters %v, want %v", names, want)
			}
			listen, admin := harness.MustFreePort(t), harness.MustFreePort(t)
			bootstrap := harness.MustWriteFile(t, "istio-static.yaml",
				inboundBootstrap(t, listen, admin, harness.MustStartEcho(t), filters))
			e := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{Bootstrap: bootstrap, AdminPort: admin, Name: "envoy-static"})
			p := &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen)}
			r, err := p.get(withForged(map[string][]string{"x-user-id": {"alice"}}))
			if err != nil {
				t.Fatal(err)
			}
			noForged(t, r)
			if v := r.Header("x-experiment-checkout-button"); len(v) != 1 || (v[0] != "blue" && v[0] != "green") {
				t.Errorf("x-experiment-checkout-button = %q, want the static experiment's assignment", v)
			}
			if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != "static-1" {
				t.Errorf("x-experiments-version = %q, want [static-1]", v)
			}
		})
	}
}

// stripForged is the EnvoyFilter static mode requires: allot.strip_forged
// alone, first in the chain.
const stripForged = "deploy/istio/envoyfilter-strip-forged.yaml"

// forged are assignment headers a client may forge, every one a header the
// filter owns (filter/plugin: Config.OwnsHeader with the default names) and
// allot.strip_forged's regex matches: x-experiment-<anything> (the bare
// prefix too, and in any casing), x-experiments, x-experiments-version.
// TestIstioStripForged runs allot.strip_forged alone — the filter as each
// shipped EnvoyFilter carries it, with the router and no Allot, which is
// the chain a request meets while the Wasm VM is down (FAIL_OPEN skips it)
// — in Envoy: no forged assignment header reaches the service, in any
// casing, and x-experimental-flag does.
func TestIstioStripForged(t *testing.T) {
	for _, path := range []string{
		"deploy/istio/envoyfilter-ecds.yaml",
		"deploy/istio/envoyfilter-ecds-native.yaml",
		stripForged,
	} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var filters []any
			for _, f := range inboundFilters(t, path, []any{router}) {
				if name := f.(map[string]any)["name"]; name == "allot.strip_forged" || name == "envoy.filters.http.router" {
					filters = append(filters, f)
				}
			}
			if names := filterNames(filters); !slices.Equal(names, []string{"allot.strip_forged", "envoy.filters.http.router"}) {
				t.Fatalf("http_filters %v, want allot.strip_forged from %s, then the router", names, path)
			}
			noForged(t, getThrough(t, filters))
		})
	}
	// The control: with the router alone, the same headers reach the service.
	t.Run("router alone", func(t *testing.T) {
		r := getThrough(t, []any{router})
		for _, h := range forged {
			if v := r.Header(h); len(v) != 1 || v[0] != "forged" {
				t.Errorf("%s = %q, want [forged] without allot.strip_forged", h, v)
			}
		}
	})
}

// getThrough sends one request with every forged header through an Envoy
// whose inbound HTTP connection manager runs filters, to the echo upstream.
func getThrough(t *testing.T, filters []any) harness.EchoResponse {
	t.Helper()
	listen, admin := harness.MustFreePort(t), harness.MustFreePort(t)
	bootstrap := harness.MustWriteFile(t, "istio-strip.yaml",
		inboundBootstrap(t, listen, admin, harness.MustStartEcho(t), filters))
	e := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{Bootstrap: bootstrap, AdminPort: admin, Name: "envoy-strip"})
	p := &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen)}
	r, err := p.get(withForged(map[string][]string{"x-user-id": {"alice"}}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
