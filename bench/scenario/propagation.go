package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

const (
	propWrites = 20
	// PropSimulated is the simulated xDS clients of the propagation section.
	PropSimulated = 1000
	adminToken    = "dev-admin-token-change-me" // envoy-configs/dev-tokens.json, loopback only
)

// devTokens is envoy-configs/dev-tokens.json, which holds adminToken.
func devTokens(o variant.Options) string {
	return filepath.Join(o.Root, "envoy-configs", "dev-tokens.json")
}

// MeasurePropagation measures how long a waited write takes to reach
// real Envoys and simulated xDS clients; a failure is reported in the
// result, not returned.
func MeasurePropagation(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) report.Propagation {
	var pr report.Propagation
	real, sim, err := propagate(ctx, o, p, logf)
	pr.Real, pr.Simulated = real, sim
	if err != nil {
		pr.NotMeasured = err.Error()
	}
	return pr
}

func propagate(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) (real, sim *report.Spread, err error) {
	bins := map[string]string{}
	for _, pkg := range []string{"allotd", "allot-xdsload"} {
		out := filepath.Join(p.Raw, "bin", pkg)
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
	db := filepath.Join(p.Raw, "propagation.db")
	os.Remove(db)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	xds := "127.0.0.1:" + strconv.Itoa(xdsPort)
	allotd, err := harness.LaunchAllotd("allotd", filepath.Join(p.Raw, "allotd.log"), bins["allotd"], -1, harness.Allotd{
		Admin: admin, XDS: xds, DB: db, Tokens: devTokens(o), Wasm: p.AllotWasm, LogLevel: "warn"})
	if err != nil {
		return nil, nil, err
	}
	defer allotd.Terminate()
	if err := allotd.WaitTCP(admin, 20*time.Second); err != nil {
		return nil, nil, err
	}

	// Three real Envoys subscribed over ADS (ECDS): envoy-configs/sidecar.yaml
	// on ports from the kernel; no request reaches them.
	bootPath, err := harness.ConfigBootstrap{Path: filepath.Join(o.Root, "envoy-configs", "sidecar.yaml"),
		XDS: xdsPort, Module: p.AllotWasm, AccessLog: os.DevNull}.Render(p.Raw)
	if err != nil {
		return nil, nil, err
	}
	for i := range 3 {
		name := fmt.Sprintf("prop-%d", i)
		e, err := startEnvoy(ctx, o.Envoy, p.Raw, name, bootPath, 1, o.EnvoyCPU, nil, "--service-node", name, "--service-cluster", "prop")
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

	load, err := startProc("allot-xdsload", filepath.Join(p.Raw, "xdsload.log"), o.LoadCPU, nil, bins["allot-xdsload"],
		"-addr", xds, "-clients", strconv.Itoa(PropSimulated), "-conns", "50", "-cluster", "sim")
	if err != nil {
		return real, nil, err
	}
	defer load.Terminate()
	if err := waitProxies(ctx, admin, 3+PropSimulated); err != nil {
		return real, nil, fmt.Errorf("simulated clients: %w", err)
	}
	logf("propagation: %d writes to %d simulated clients + 3 Envoys", propWrites, PropSimulated)
	sim, err = writes(ctx, admin, "sim", 3+PropSimulated)
	if sim != nil {
		sim.Note = fmt.Sprintf("allot-xdsload simulates the clients (%d streams over 50 gRPC connections, pinned to the load generator's CPU); the 3 real Envoys stay connected and are waited for too.", PropSimulated)
	}
	return real, sim, err
}

// writes creates propWrites experiments, each with ?wait=, and times them.
func writes(ctx context.Context, admin, tag string, proxies int) (*report.Spread, error) {
	s := &report.Spread{Proxies: proxies, Writes: propWrites}
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
	s.Summarize()
	return s, nil
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
