//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allotmesh/allot/control-plane/rollout"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/internal/harness"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// The rollout tests run the xDS server in-process, fed from memory, so they
// can call what the admin API calls after a write (Targets, Refresh,
// WaitFor) and read every proxy's status; the Envoys, the filter and the
// echo upstream are the real ones.

// controlPlane is an in-process xds.Server on a fixed port, serving the
// experiments it holds through translate, like allotd.
type controlPlane struct {
	t    *testing.T
	port int
	mesh translate.Mesh

	mu   sync.Mutex
	exps []*experimentv1.Experiment

	x    *xds.Server
	stop func()
}

func startControlPlane(t *testing.T, port int, wasm string) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, port: port, mesh: translate.Mesh{WasmPath: wasm}}
	cp.start()
	t.Cleanup(func() { cp.stop() })
	return cp
}

// start serves a fresh xds.Server: a restarted control plane with the same
// data.
func (cp *controlPlane) start() {
	cp.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cp.x = xds.New(ctx, cp.build)
	g := grpc.NewServer()
	cp.x.Register(g)
	var ln net.Listener
	harness.MustEventually(cp.t, 5*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cp.port))
		return err
	})
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	cp.stop = func() { cancel(); g.Stop(); <-done }
}

func (cp *controlPlane) restart() {
	cp.t.Helper()
	cp.stop()
	cp.start()
}

func (cp *controlPlane) build(cluster string) (string, *corev3.TypedExtensionConfig, error) {
	cp.mu.Lock()
	exps := cp.exps
	cp.mu.Unlock()
	cfg, err := translate.FilterConfig(exps, cluster, time.Now(), cp.mesh)
	if err != nil {
		return "", nil, err
	}
	ext, err := translate.ExtensionConfig(cfg, cp.mesh)
	if err != nil {
		return "", nil, err
	}
	return cfg.Version, ext, nil
}

// write replaces the experiments and does what the admin API does after a
// store write: refresh, then wait for the proxies of the changed clusters.
func (cp *controlPlane) write(defs ...map[string]any) (rollout.Rollout, error) {
	cp.t.Helper()
	exps := make([]*experimentv1.Experiment, len(defs))
	for i, d := range defs {
		b, err := json.Marshal(d)
		if err != nil {
			cp.t.Fatal(err)
		}
		exps[i] = &experimentv1.Experiment{}
		if err := protojson.Unmarshal(b, exps[i]); err != nil {
			cp.t.Fatalf("experiment %s: %v", b, err)
		}
	}
	before := cp.x.Targets()
	cp.mu.Lock()
	cp.exps = exps
	cp.mu.Unlock()
	if err := cp.x.Refresh(context.Background()); err != nil {
		cp.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cp.x.WaitFor(ctx, cp.x.Targets().Changed(before))
}

// proxy returns node's status (ok false if it is not connected).
func (cp *controlPlane) proxy(node string) (rollout.ProxyStatus, bool) {
	for _, p := range cp.x.Proxies() {
		if p.NodeID == node {
			return p, true
		}
	}
	return rollout.ProxyStatus{}, false
}

// waitState waits until node is connected and in state st.
func (cp *controlPlane) waitState(node string, st rollout.State) rollout.ProxyStatus {
	cp.t.Helper()
	var p rollout.ProxyStatus
	harness.MustEventually(cp.t, 15*time.Second, func() error {
		var ok bool
		if p, ok = cp.proxy(node); !ok {
			return fmt.Errorf("%s not connected", node)
		}
		if p.State != st {
			return fmt.Errorf("%s: %s, want %s: %+v", node, p.State, st, p)
		}
		return nil
	})
	return p
}

// rolloutSystem is a system (see system_test.go) whose xDS server is a
// controlPlane instead of allotd.
func rolloutSystem(t *testing.T) (*system, *controlPlane) {
	t.Helper()
	s := &system{t: t, art: wasmArtifact, wasm: harness.MustBuildWasm(t, "./filter"), echoAddr: harness.MustStartEcho(t), xdsPort: harness.MustFreePort(t)}
	return s, startControlPlane(t, s.xdsPort, s.wasm)
}

// checkoutRamp is the "checkout" experiment with share w in treatment.
func checkoutRamp(w float64) map[string]any {
	return map[string]any{"key": "checkout", "variations": []string{"control", "treatment"}, "weights": []float64{1 - w, w}}
}

// TestRolloutWaitsForEveryProxy ramps an experiment in 20 steps across
// three Envoys. After each write WaitFor returns only once all three
// acknowledged, and a request through any of them right away gets the new
// assignment: each step checks units whose variation that step changes.
func TestRolloutWaitsForEveryProxy(t *testing.T) {
	s, cp := rolloutSystem(t)
	if _, err := cp.write(checkoutRamp(0)); err != nil {
		t.Fatal(err)
	}
	var proxies []*proxy
	var nodes []string
	for i := range 3 {
		node := fmt.Sprintf("checkout-%d", i+1)
		proxies = append(proxies, s.startSidecar(node, "checkout-svc"))
		nodes = append(nodes, node)
		cp.waitState(node, rollout.StateApplied)
	}

	units := userIDs(2000)
	assign := func(def map[string]any) map[string]string { return assignments(t, def, units) }
	prev := assign(checkoutRamp(0))
	var slowest time.Duration
	for step := 1; step <= 20; step++ {
		w := float64(step) / 20
		def := checkoutRamp(w)
		want := assign(def)
		var probe []string // units this step moves, plus a few it does not
		for _, u := range units {
			if want[u] != prev[u] && len(probe) < 15 {
				probe = append(probe, u)
			}
		}
		if len(probe) == 0 {
			t.Fatalf("step %d moves no unit among %d", step, len(units))
		}
		probe = append(probe, units[step], units[1000+step])

		start := time.Now()
		r, err := cp.write(def)
		took := time.Since(start)
		slowest = max(slowest, took)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if len(r.Proxies) != 3 || r.Count(rollout.StateApplied) != 3 {
			t.Fatalf("step %d: rollout %+v, want 3 applied", step, r.Proxies)
		}
		for i, p := range proxies {
			for _, u := range probe {
				resp, err := p.get(map[string][]string{"x-user-id": {u}})
				if err != nil {
					t.Fatal(err)
				}
				if v := resp.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want[u] {
					t.Fatalf("step %d (treatment %.2f): %s right after WaitFor: %s got %q, want [%s] (previous %s)",
						step, w, nodes[i], u, v, want[u], prev[u])
				}
			}
		}
		prev = want
	}
	t.Logf("20 writes, each acknowledged by 3 Envoys; slowest write→all-ACK %v", slowest.Round(time.Millisecond))
}

// rejectingBootstrap renders envoy-configs/sidecar.yaml for an Envoy whose
// allot filter slot accepts only a HeaderMutation filter: it rejects every
// Wasm configuration the control plane sends ("filter config has type URL
// ... but expect ...") and keeps serving its default. This is a real Envoy
// NACK, as from a proxy whose bootstrap does not match what the control
// plane serves; the filter itself cannot be made to reject a configuration
// on one proxy only, because every proxy of a cluster gets the same one and
// the admin API already refuses what the filter would.
func (s *system) startRejectingSidecar(node, cluster string) *proxy {
	s.t.Helper()
	const wasmType = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	const otherType = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
	root, err := harness.RepoRoot()
	if err != nil {
		s.t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "envoy-configs/sidecar.yaml"))
	if err != nil {
		s.t.Fatal(err)
	}
	text := string(src)
	from := strings.Index(text, "              default_config:\n")
	to := strings.Index(text, "          - name: envoy.filters.http.router")
	if from < 0 || to < from {
		s.t.Fatal("sidecar.yaml: no default_config block before the router")
	}
	_, echoPort, _ := splitHostPort(s.echoAddr)
	return startEnvoy(s.t, "envoy-configs/sidecar.yaml", s.xdsPort, s.wasm, nil, node, cluster, map[string]string{
		"port_value: 8081":                   "port_value: " + echoPort,
		"              - " + wasmType + "\n": "              - " + otherType + "\n",
		text[from:to]: "              default_config:\n" +
			"                \"@type\": " + otherType + "\n" +
			"                mutations: {}\n",
	})
}

// ecdsStat returns Envoy's counter for the allot ECDS subscription, e.g.
// "config_reload" or "config_fail".
func ecdsStat(t *testing.T, p *proxy, name string) int64 {
	t.Helper()
	full := "extension_config_discovery.http_filter.allot." + name
	v, ok := p.MustStat(t, full)
	if !ok {
		var have []string
		for k := range p.MustStats(t) {
			if strings.HasPrefix(k, "extension_config_discovery.") {
				have = append(have, k)
			}
		}
		t.Fatalf("envoy has no %s; it has %v", full, have)
	}
	return v
}

// TestRolloutRejectedByOneProxy: one of three Envoys rejects the
// configuration. It shows as rejected on that proxy only, WaitFor reports
// it at once instead of waiting, it is sent each configuration exactly once
// (no NACK loop), and the other two apply it.
func TestRolloutRejectedByOneProxy(t *testing.T) {
	s, cp := rolloutSystem(t)
	if _, err := cp.write(checkoutRamp(0.5)); err != nil {
		t.Fatal(err)
	}
	good := []*proxy{s.startSidecar("shop-1", "shop"), s.startSidecar("shop-2", "shop")}
	bad := s.startRejectingSidecar("shop-bad", "shop")
	cp.waitState("shop-1", rollout.StateApplied)
	cp.waitState("shop-2", rollout.StateApplied)
	rej := cp.waitState("shop-bad", rollout.StateRejected)
	if rej.Rejected == nil || !strings.Contains(rej.Rejected.Error, "type URL") {
		t.Errorf("shop-bad rejection: %+v, want Envoy's type URL error", rej.Rejected)
	}

	start := time.Now()
	r, err := cp.write(checkoutRamp(1))
	if !errors.Is(err, rollout.ErrRejected) {
		t.Fatalf("WaitFor = %v, want ErrRejected", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("WaitFor took %v: a rejection must end the wait for that proxy", time.Since(start))
	}
	states := map[string]rollout.State{}
	for _, p := range r.Proxies {
		states[p.NodeID] = p.State
	}
	if want := map[string]rollout.State{"shop-1": rollout.StateApplied, "shop-2": rollout.StateApplied, "shop-bad": rollout.StateRejected}; fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("rollout states %v, want %v", states, want)
	}
	for _, p := range good {
		resp, err := p.get(map[string][]string{"x-user-id": {"anyone"}})
		if err != nil {
			t.Fatal(err)
		}
		if v := resp.Header("x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
			t.Errorf("after the write: x-experiment-checkout = %q, want [treatment]", v)
		}
	}

	// Watch for a loop, then make one more change: each proxy must have been
	// sent exactly one configuration per change (3 in all), and the
	// rejecting Envoy must have failed exactly those it was sent.
	time.Sleep(time.Second)
	if _, err := cp.write(checkoutRamp(0)); !errors.Is(err, rollout.ErrRejected) {
		t.Fatalf("third write: %v, want ErrRejected", err)
	}
	time.Sleep(time.Second)
	for _, node := range []string{"shop-1", "shop-2", "shop-bad"} {
		p, _ := cp.proxy(node)
		if p.Pushes != 3 {
			t.Errorf("%s was sent %d configurations, want 3 (one per change)", node, p.Pushes)
		}
	}
	if n := ecdsStat(t, bad, "config_fail"); n != 3 {
		t.Errorf("shop-bad config_fail = %d, want 3", n)
	}
	if n := ecdsStat(t, bad, "config_reload"); n != 0 {
		t.Errorf("shop-bad config_reload = %d, want 0", n)
	}
	for i, p := range good {
		if n := ecdsStat(t, p, "config_reload"); n != 3 {
			t.Errorf("shop-%d config_reload = %d, want 3", i+1, n)
		}
	}
}

// TestRolloutRestartNoReconfiguration restarts the control plane with
// unchanged data: the Envoys reconnect with the version they run and are
// not reconfigured. The next real change then reloads each exactly once,
// which also shows the reconnected streams are live.
func TestRolloutRestartNoReconfiguration(t *testing.T) {
	s, cp := rolloutSystem(t)
	if _, err := cp.write(checkoutRamp(0.5)); err != nil {
		t.Fatal(err)
	}
	var proxies []*proxy
	for i := range 3 {
		node := fmt.Sprintf("pay-%d", i+1)
		proxies = append(proxies, s.startSidecar(node, "pay"))
		cp.waitState(node, rollout.StateApplied)
	}
	before := ecdsCounts(t, proxies)
	version, _ := cp.x.Version("pay")

	cp.restart()
	for i, p := range proxies {
		node := fmt.Sprintf("pay-%d", i+1)
		waitReconnect(t, p, before[i])
		st := cp.waitState(node, rollout.StateApplied)
		if st.Acked != version || st.Pushes != 0 {
			t.Errorf("%s after restart: acked %q pushes %d, want %q and 0 pushes", node, st.Acked, st.Pushes, version)
		}
	}
	time.Sleep(time.Second)
	checkECDSCounts(t, proxies, before, 0)

	if _, err := cp.write(checkoutRamp(1)); err != nil {
		t.Fatal(err)
	}
	checkECDSCounts(t, proxies, before, 1)
}

// ecdsCount holds the Envoy counters a restart must not move.
type ecdsCount struct {
	reload, success, connects int64
}

func ecdsCounts(t *testing.T, proxies []*proxy) []ecdsCount {
	t.Helper()
	out := make([]ecdsCount, len(proxies))
	for i, p := range proxies {
		// update_success counts every configuration accepted, even one
		// identical to the running one (which config_reload skips).
		out[i] = ecdsCount{reload: ecdsStat(t, p, "config_reload"), success: ecdsStat(t, p, "update_success")}
		out[i].connects, _ = p.MustStat(t, "cluster.allot_xds.upstream_cx_total")
	}
	return out
}

// waitReconnect waits until p opened a new xDS connection since before.
func waitReconnect(t *testing.T, p *proxy, before ecdsCount) {
	t.Helper()
	harness.MustEventually(t, 15*time.Second, func() error {
		n, _ := p.MustStat(t, "cluster.allot_xds.upstream_cx_total")
		if c, _ := p.MustStat(t, "control_plane.connected_state"); n <= before.connects || c != 1 {
			return fmt.Errorf("%s has not reconnected (connections %d, connected %d)", p.Name(), n, c)
		}
		return nil
	})
}

// checkECDSCounts checks that each proxy accepted and reloaded exactly
// changes configurations since before.
// Envoy counts update_success when its subscription accepts a
// configuration (and then ACKs it) but config_reload only once the workers
// run it, so a waited write can return before config_reload moved: the
// counts are polled until they match, for at most 5 s.
func checkECDSCounts(t *testing.T, proxies []*proxy, before []ecdsCount, changes int64) {
	t.Helper()
	err := harness.Eventually(t.Context(), 5*time.Second, func() error {
		var errs []error
		for i, now := range ecdsCounts(t, proxies) {
			if now.reload != before[i].reload+changes || now.success != before[i].success+changes {
				errs = append(errs, fmt.Errorf("%s: config_reload %d → %d, update_success %d → %d; want +%d each",
					proxies[i].Name(), before[i].reload, now.reload, before[i].success, now.success, changes))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Error(err)
	}
}

// TestRolloutRestartAllotd restarts the real allotd on its store: the
// Envoys reconnect and are not reconfigured; the next write reaches each
// exactly once.
func TestRolloutRestartAllotd(t *testing.T) {
	s := startSystem(t)
	def := checkoutRamp(0.5)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", def, nil)
	set := compile(t, def)
	var proxies []*proxy
	for i := range 3 {
		p := s.startSidecar(fmt.Sprintf("pay-%d", i+1), "pay")
		harness.MustEventually(t, 15*time.Second, func() error {
			r, err := p.get(map[string][]string{"x-user-id": {"probe"}})
			if err != nil {
				return err
			}
			want := set.Assign(nil, engine.Attributes{"id": "probe"})[0].Value
			if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want {
				return fmt.Errorf("x-experiment-checkout = %q, want [%s]", v, want)
			}
			return nil
		})
		proxies = append(proxies, p)
	}
	before := ecdsCounts(t, proxies)

	s.allotd.MustTerminate(t)
	s.startAllotd()
	for i, p := range proxies {
		waitReconnect(t, p, before[i])
	}
	time.Sleep(time.Second)
	checkECDSCounts(t, proxies, before, 0)

	var cur map[string]any
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/checkout", nil, &cur)
	def = checkoutRamp(1)
	def["revision"] = cur["revision"]
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/checkout", def, nil)
	harness.MustEventually(t, 10*time.Second, func() error {
		for i, now := range ecdsCounts(t, proxies) {
			if now.success == before[i].success {
				return fmt.Errorf("%s has not received the change", proxies[i].Name())
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	checkECDSCounts(t, proxies, before, 1)
}
