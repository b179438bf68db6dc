package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// propagation is write→all-ACK latency of a configuration change, measured
// through allotd's admin API: a write with ?wait= returns when every
// connected proxy of the clusters it changed has applied (ACKed) or rejected
// the new version, so the request's duration is write → last ACK.
type propagation struct {
	// NotMeasured says why, when a part could not be measured.
	NotMeasured string  `json:"not_measured,omitempty"`
	Real        *spread `json:"real_envoys,omitempty"`
	Simulated   *spread `json:"simulated_clients,omitempty"`
}

// spread summarises write→ACK latencies over several writes.
type spread struct {
	Proxies int       `json:"proxies"`
	Writes  int       `json:"writes"`
	AllAck  []float64 `json:"all_ack_ms"` // per write: until the last proxy ACKed
	P50     float64   `json:"p50_ms"`
	P99     float64   `json:"p99_ms"`
	Max     float64   `json:"max_ms"`
	Note    string    `json:"note,omitempty"`
}

const (
	propWrites    = 20
	propSimulated = 1000
	adminToken    = "dev-admin-token-change-me" // envoy-configs/dev-tokens.json, loopback only
)

func measurePropagation(ctx context.Context, o Options, p *paths, logf func(string, ...any)) propagation {
	var pr propagation
	real, sim, err := propagate(ctx, o, p, logf)
	pr.Real, pr.Simulated = real, sim
	if err != nil {
		pr.NotMeasured = err.Error()
	}
	return pr
}

func propagate(ctx context.Context, o Options, p *paths, logf func(string, ...any)) (real, sim *spread, err error) {
	bins := map[string]string{}
	for _, pkg := range []string{"allotd", "allot-xdsload"} {
		out := filepath.Join(p.raw, "bin", pkg)
		if err := harness.GoBuild(ctx, o.Root, out, "./control-plane/cmd/"+pkg, nil); err != nil {
			return nil, nil, fmt.Errorf("control-plane/cmd/%s does not build: %w", pkg, err)
		}
		bins[pkg] = out
	}
	adminPort, err := harness.FreePort()
	if err != nil {
		return nil, nil, err
	}
	xdsPort, err := harness.FreePort()
	if err != nil {
		return nil, nil, err
	}
	db := filepath.Join(p.raw, "propagation.db")
	os.Remove(db)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	xds := "127.0.0.1:" + strconv.Itoa(xdsPort)
	allotd, err := startProc("allotd", filepath.Join(p.raw, "allotd.log"), -1, nil, bins["allotd"],
		"-admin-addr", admin, "-xds-addr", xds, "-db", db,
		"-tokens", filepath.Join(o.Root, "envoy-configs", "dev-tokens.json"), "-wasm-path", p.allotWasm, "-log-level", "warn")
	if err != nil {
		return nil, nil, err
	}
	defer allotd.Terminate()
	if err := allotd.WaitTCP(admin, 20*time.Second); err != nil {
		return nil, nil, err
	}

	// Three real Envoys subscribed over ADS (ECDS), like envoy-configs/sidecar.yaml.
	boot, err := adsBootstrap(xdsPort, p.allotWasm)
	if err != nil {
		return nil, nil, err
	}
	bootPath := filepath.Join(p.raw, "propagation-envoy.json")
	if err := os.WriteFile(bootPath, boot, 0o644); err != nil {
		return nil, nil, err
	}
	for i := range 3 {
		name := fmt.Sprintf("prop-%d", i)
		e, err := startEnvoy(ctx, o.Envoy, p.raw, name, bootPath, 1, o.EnvoyCPU, nil, "--service-node", name, "--service-cluster", "prop")
		if err != nil {
			return nil, nil, err
		}
		defer e.Terminate()
	}
	if err := waitProxies(ctx, admin, 3); err != nil {
		return nil, nil, err
	}
	logf("propagation: %d writes to 3 real Envoys", propWrites)
	if real, err = writes(ctx, admin, "real", 3); err != nil {
		return nil, nil, err
	}

	load, err := startProc("allot-xdsload", filepath.Join(p.raw, "xdsload.log"), o.LoadCPU, nil, bins["allot-xdsload"],
		"-addr", xds, "-clients", strconv.Itoa(propSimulated), "-conns", "50", "-cluster", "sim")
	if err != nil {
		return real, nil, err
	}
	defer load.Terminate()
	if err := waitProxies(ctx, admin, 3+propSimulated); err != nil {
		return real, nil, fmt.Errorf("simulated clients: %w", err)
	}
	logf("propagation: %d writes to %d simulated clients + 3 Envoys", propWrites, propSimulated)
	sim, err = writes(ctx, admin, "sim", 3+propSimulated)
	if sim != nil {
		sim.Note = fmt.Sprintf("allot-xdsload simulates the clients (%d streams over 50 gRPC connections, pinned to the load generator's CPU); the 3 real Envoys stay connected and are waited for too.", propSimulated)
	}
	return real, sim, err
}

// writes creates propWrites experiments, each with ?wait=, and times them.
func writes(ctx context.Context, admin, tag string, proxies int) (*spread, error) {
	s := &spread{Proxies: proxies, Writes: propWrites}
	for i := range propWrites {
		body := json.RawMessage(fmt.Sprintf(`{"key":"prop-%s-%d","variations":["a","b"],"weights":[0.5,0.5]}`, tag, i))
		var out struct {
			Rollout struct {
				Result  string            `json:"result"`
				Counts  map[string]int    `json:"counts"`
				Proxies []json.RawMessage `json:"proxies"`
			} `json:"rollout"`
		}
		t0 := time.Now()
		code, _, err := harness.AdminCall(ctx, client, "http://"+admin, adminToken, http.MethodPost, "/v1/experiments?wait=30s", body, &out)
		d := time.Since(t0)
		if code/100 != 2 || err != nil {
			return nil, fmt.Errorf("write %d: %d %s (%v)", i, code, http.StatusText(code), err)
		}
		if out.Rollout.Result != "applied" || out.Rollout.Counts["applied"] != proxies || len(out.Rollout.Proxies) != 0 {
			return nil, fmt.Errorf("write %d: rollout %q applied by %d proxies (%d listed as not), want applied by %d",
				i, out.Rollout.Result, out.Rollout.Counts["applied"], len(out.Rollout.Proxies), proxies)
		}
		s.AllAck = append(s.AllAck, float64(d.Microseconds())/1e3)
	}
	s.summarize()
	return s, nil
}

// summarize sets P50, P99 and Max from AllAck.
func (s *spread) summarize() {
	sorted := slices.Sorted(slices.Values(s.AllAck))
	s.P50, s.P99, s.Max = harness.Quantile(sorted, 0.5), harness.Quantile(sorted, 0.99), harness.Quantile(sorted, 1)
}

// waitProxies waits until allotd's rollout status lists n proxies.
func waitProxies(ctx context.Context, admin string, n int) error {
	var last int
	err := harness.Eventually(ctx, 60*time.Second, func() error {
		var out struct {
			Proxies []json.RawMessage `json:"proxies"`
		}
		if _, _, err := harness.AdminCall(ctx, client, "http://"+admin, adminToken, http.MethodGet, "/v1/rollout", nil, &out); err != nil {
			return err
		}
		if last = len(out.Proxies); last < n {
			return fmt.Errorf("allotd lists %d connected proxies, want %d", last, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d proxies: %w", n, err)
	}
	return nil
}

// adsBootstrap is a sidecar bootstrap whose Allot filter comes over ADS
// (ECDS) from allotd, as in envoy-configs/sidecar.yaml.
func adsBootstrap(xdsPort int, wasm string) ([]byte, error) {
	def, err := wasmFilter(wasm, nil)
	if err != nil {
		return nil, err
	}
	filter := map[string]any{
		"name": "allot",
		"config_discovery": map[string]any{
			"config_source":                        map[string]any{"ads": map[string]any{}, "resource_api_version": "V3"},
			"type_urls":                            []any{"type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"},
			"apply_default_config_without_warming": true,
			"default_config":                       def[0].(map[string]any)["typed_config"],
		},
	}
	b, err := bootstrap([]any{filter}, 0)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["dynamic_resources"] = map[string]any{"ads_config": map[string]any{
		"api_type": "GRPC", "transport_api_version": "V3",
		"grpc_services": []any{map[string]any{"envoy_grpc": map[string]any{"cluster_name": "allot_xds"}}},
	}}
	sr := m["static_resources"].(map[string]any)
	sr["clusters"] = []any{map[string]any{
		"name": "allot_xds", "type": "STATIC", "connect_timeout": "1s",
		"typed_extension_protocol_options": map[string]any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
			},
		},
		"load_assignment": map[string]any{"cluster_name": "allot_xds", "endpoints": []any{map[string]any{
			"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": map[string]any{
				"socket_address": map[string]any{"address": "127.0.0.1", "port_value": xdsPort}}}}},
		}}},
	}}
	return json.MarshalIndent(m, "", " ")
}
