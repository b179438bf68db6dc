//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Envoy Gateway binds fixed ports (its xDS server 18000, its Wasm cache
// 18002, health 8081, the proxy's readiness 0.0.0.0:19003), so
// TestEnvoyGateway runs each mode in a network namespace of its own: it
// re-runs this test binary, as TestNetnsEnvoyGateway/<mode>, in a new
// network namespace with egInnerEnv set, and everything the mode starts
// (allotd, the echo upstream, Envoy Gateway and its Envoy, the client)
// lives and dies in there.
const (
	// egInnerEnv marks the run inside the namespace.
	egInnerEnv = "ALLOT_E2E_ENVOY_GATEWAY_NETNS"
	// egBinEnv names the envoy-gateway binary (default bin/envoy-gateway).
	egBinEnv = "ALLOT_ENVOY_GATEWAY_BIN"
	// egDeploy holds the shipped manifests the test runs.
	egDeploy = "deploy/envoy-gateway"
	// egEnvoyVersion is the Envoy release the shipped EnvoyProxies name
	// (spec.provider.host.envoyVersion), under which the test lays the
	// project's Envoy out for func-e.
	egEnvoyVersion = "1.40.0"
	// egListener is the example Gateway's listener (gateway.yaml).
	egListener = "http://127.0.0.1:8080"
)

// egAssignmentHeader matches, whole, the lowercase names of the headers
// Allot owns (x-experiment-<key>, x-experiments, x-experiments-version):
// the guard's RegularExpression in allot-ecds.yaml and allot-native.yaml.
var egAssignmentHeader = regexp.MustCompile(`^x-experiment(-.*|s|s-version)$`)

// egModes are the subtests: ECDS from allotd, then without allotd; the
// native module with a static configuration, then with its file missing;
// the header guard with no Allot filter at all. ecds, ecds-no-allotd and
// native run their mode file without its guard document, so that only
// Allot's filter can remove forged headers there.
var egModes = []string{"ecds", "ecds-no-allotd", "native", "native-no-module", "guard"}

// TestEnvoyGateway runs Allot in Envoy Gateway (bin/envoy-gateway, built by
// `make envoy-gateway`) standalone, from the manifests shipped in
// deploy/envoy-gateway, one network namespace per mode (see
// TestNetnsEnvoyGateway for what each shows). It needs root.
func TestEnvoyGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("TestEnvoyGateway runs Envoy Gateway in a network namespace of its own (its ports are fixed) and needs root; running as uid %d", os.Geteuid())
	}
	probe := exec.Command(os.Args[0], "-test.run", "^$")
	probe.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Fatalf("TestEnvoyGateway runs Envoy Gateway in a network namespace of its own (its ports are fixed), but a process in a new one (CLONE_NEWNET) could not run: %v\n%s", err, out)
	}
	bin := envoyGatewayBinary(t)
	harness.MustEnvoyBinary(t)
	for _, mode := range egModes {
		t.Run(mode, func(t *testing.T) { runInNetns(t, bin, mode) })
	}
}

// envoyGatewayBinary is $ALLOT_ENVOY_GATEWAY_BIN or bin/envoy-gateway; it
// fails the test when the file is missing.
func envoyGatewayBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(egBinEnv)
	if bin == "" {
		bin = repoPath(t, "bin/envoy-gateway")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("envoy-gateway binary: %v\nrun `make envoy-gateway` (or set %s)", err, egBinEnv)
	}
	return bin
}

// runInNetns runs TestNetnsEnvoyGateway/<mode> in a new network namespace,
// logging its output line by line, and fails when it does not pass. The
// run is its own process group, killed as a whole when it ends or after 4
// minutes.
func runInNetns(t *testing.T, bin, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestNetnsEnvoyGateway$/^"+mode+"$",
		"-test.v", "-test.count=1", "-test.timeout=210s")
	cmd.Env = append(os.Environ(), egInnerEnv+"=1", egBinEnv+"="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the run in a new network namespace: %v", err)
	}
	passed := false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if strings.Contains(line, "--- PASS: TestNetnsEnvoyGateway/"+mode+" ") {
			passed = true
		}
	}
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever is left of the group
	if err != nil || !passed {
		t.Fatalf("%s in its network namespace: %v (passed: %v)", mode, err, passed)
	}
}

// TestNetnsEnvoyGateway is TestEnvoyGateway's run inside a network
// namespace; on its own it skips.
//
//   - ecds: allotd configures Allot (the Wasm module) in Envoy Gateway's
//     proxy over ECDS (envoyproxy-ecds.yaml, allot-ecds.yaml without its
//     guard): a waited write reports the proxy applied; requests get the
//     engine's assignment, forged headers replaced or removed by the filter;
//     a new weight is live once the waited write returns; allotd's outcomes
//     count the requests.
//   - ecds-no-allotd: the same files without allotd: the admin shows the
//     filter's Wasm VM running; its default_config serves, no assignment
//     and no forged header, with no guard.
//   - native: the dynamic module with a static configuration
//     (envoyproxy-native.yaml, allot-native.yaml without its guard): the
//     header contract, forged headers removed by the filter.
//   - native-no-module: the shipped native files, whole, with the module's
//     path wrong: Envoy rejects the listener and the gateway serves nothing
//     (fails closed).
//   - guard: the guard document alone, no Allot filter: no assignment
//     header reaches the service; x-experimental-* headers do.
func TestNetnsEnvoyGateway(t *testing.T) {
	if os.Getenv(egInnerEnv) == "" {
		t.Skip("run by TestEnvoyGateway inside a network namespace of its own")
	}
	if err := egLoopbackUp(); err != nil {
		t.Fatalf("bring lo up in the namespace: %v", err)
	}
	bin := envoyGatewayBinary(t)
	t.Run("ecds", func(t *testing.T) { testEnvoyGatewayECDS(t, bin) })
	t.Run("ecds-no-allotd", func(t *testing.T) { testEnvoyGatewayNoAllotd(t, bin) })
	t.Run("native", func(t *testing.T) { testEnvoyGatewayNative(t, bin) })
	t.Run("native-no-module", func(t *testing.T) { testEnvoyGatewayNoModule(t, bin) })
	t.Run("guard", func(t *testing.T) { testEnvoyGatewayGuard(t, bin) })
}

func testEnvoyGatewayECDS(t *testing.T, bin string) {
	s := startSystemFor(t, wasmArtifact)
	startEnvoyGateway(t, bin, ecdsResources(t, s.echoAddr, s.xdsPort, s.wasm, false))
	var status rolloutJSON
	harness.MustEventually(t, 30*time.Second, func() error {
		if code := s.api("GET", "/v1/rollout", nil, &status); code != http.StatusOK || len(status.Proxies) != 1 {
			return fmt.Errorf("GET /v1/rollout: status %d, %d proxies, want 1", code, len(status.Proxies))
		}
		return nil
	})
	t.Logf("allotd serves Envoy Gateway's proxy: node %q, cluster %q", status.Proxies[0].NodeID, status.Proxies[0].Cluster)

	def := map[string]any{"key": "gw", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}, "observe": true}
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", def, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create with wait: %+v, want applied by the gateway's proxy", w.Rollout)
	}
	units := userIDs(40)
	want := assignments(t, def, units)
	sent := egCheckAssignments(t, "gw", want)

	// Outcomes: allotd counts the gateway's requests of the observed
	// experiment (the stat sink flushes every 5 s).
	harness.MustEventually(t, 30*time.Second, func() error {
		var raw json.RawMessage
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/gw/outcomes", nil, &raw)
		var o adminv1.Outcomes
		if err := protojson.Unmarshal(raw, &o); err != nil {
			return err
		}
		got := map[string]int64{}
		for i, v := range []string{"a", "b"} {
			if i < len(o.GetTotal()) {
				got[v] = o.GetTotal()[i].GetRequests()
			}
		}
		if got["a"] != sent["a"] || got["b"] != sent["b"] {
			return fmt.Errorf("outcomes count %v, the test sent %v: %s", got, sent, raw)
		}
		return nil
	})
	t.Logf("allotd's outcomes of gw count the %d requests sent through the gateway: %v", len(units), sent)

	// A ramp to 100 % b, waited: live at the gateway when the write returns.
	def["weights"], def["revision"] = []float64{0, 1}, w.Experiment["revision"]
	start := time.Now()
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/gw?wait=10s", def, &w)
	took := time.Since(start)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("ramp with wait: %+v, want applied by the gateway's proxy", w.Rollout)
	}
	r, err := harness.GetEcho(egListener+"/", http.Header{"x-user-id": {units[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Header("x-experiment-gw"); len(v) != 1 || v[0] != "b" {
		t.Fatalf("right after the waited ramp: x-experiment-gw = %q, want [b]", v)
	}
	t.Logf("ramp to 100%% b: applied by the gateway's proxy and live %v after the write", took.Round(time.Millisecond))
}

func testEnvoyGatewayNoAllotd(t *testing.T, bin string) {
	// allot_xds points at a port nobody listens on; no guard, so only
	// the filter's default_config can remove the forged headers.
	dir := startEnvoyGateway(t, bin, ecdsResources(t, harness.MustStartEcho(t), harness.MustFreePort(t), harness.MustBuildWasm(t, "./filter"), false))
	egMustRunAllot(t, dir)
	r, err := harness.GetEcho(egListener+"/", http.Header{"x-user-id": {"user-1"}, "x-experiment-gw": {"forged"},
		"x-experiments": {`gw="forged"`}, "x-experiments-version": {"forged"}})
	if err != nil {
		t.Fatal(err)
	}
	egNoAssignment(t, r, "without allotd")
}

func testEnvoyGatewayNoModule(t *testing.T, bin string) {
	resources := nativeResources(t, harness.MustStartEcho(t), "/nonexistent/liballot.so")
	resources["allot-native.yaml"] = egManifest(t, "allot-native.yaml", nil) // as shipped, with its guard
	eg, _ := launchEnvoyGateway(t, bin, resources)
	const rejected = "listener 'default/allot/http' config rejected"
	harness.MustEventually(t, 60*time.Second, func() error {
		if log := eg.MustLog(t); !strings.Contains(log, rejected) {
			return fmt.Errorf("Envoy Gateway's log does not say %q yet", rejected)
		}
		return nil
	})
	// Not one request served for 2 s after the rejection.
	var last error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, err := harness.GetEcho(egListener+"/", http.Header{"x-user-id": {"user-1"}, "x-experiment-checkout-button": {"forged"}})
		if err == nil {
			t.Fatalf("with the module missing the gateway served a request: %+v, want no listener", r.Headers)
		}
		last = err
	}
	t.Logf("with the module missing Envoy rejected the listener; every request for 2 s failed, the last: %v", last)
}

func testEnvoyGatewayNative(t *testing.T, bin string) {
	policy := egModeFile(t, "allot-native.yaml", nil, false)
	resources := nativeResources(t, harness.MustStartEcho(t), harness.MustBuildNative(t, "./filter/native", "liballot.so"))
	resources["allot-native.yaml"] = policy
	startEnvoyGateway(t, bin, resources)
	// The oracle: the engine on the experiment the shipped policy holds.
	var p struct {
		Spec struct {
			DynamicModule []struct {
				Config struct {
					Version     string           `json:"version"`
					Experiments []map[string]any `json:"experiments"`
				} `json:"config"`
			} `json:"dynamicModule"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(policy), &p); err != nil || len(p.Spec.DynamicModule) != 1 || len(p.Spec.DynamicModule[0].Config.Experiments) != 1 {
		t.Fatalf("allot-native.yaml: want one dynamic module with one experiment: %v", err)
	}
	cfg := p.Spec.DynamicModule[0].Config
	def := cfg.Experiments[0]
	key, _ := def["key"].(string)
	egCheckAssignments(t, key, assignments(t, def, userIDs(40)))

	// Without a unit id: no assignment, forged headers removed; the
	// version header names the configuration that evaluated it.
	r, err := harness.GetEcho(egListener+"/", http.Header{"x-experiment-" + key: {"forged"}, "x-experiments": {"forged"},
		"x-experiments-version": {"forged"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range r.Headers {
		if n := strings.ToLower(name); egAssignmentHeader.MatchString(n) && n != "x-experiments-version" {
			t.Errorf("a request without a unit id: the service got %s: %q, want no assignment", name, vals)
		}
	}
	if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != cfg.Version {
		t.Errorf("a request without a unit id: x-experiments-version = %q, want [%s]", v, cfg.Version)
	}
}

func testEnvoyGatewayGuard(t *testing.T, bin string) {
	// The EnvoyProxy registers the module, but no policy uses it: the
	// gateway runs no Allot filter, as when its policy is missing. Only the
	// guard document of the mode files is applied; it is the same in both.
	guard := egGuard(t, "allot-native.yaml")
	if other := egGuard(t, "allot-ecds.yaml"); other != guard {
		t.Fatalf("the guard documents of allot-native.yaml and allot-ecds.yaml differ:\n%s\n---\n%s", guard, other)
	}
	resources := nativeResources(t, harness.MustStartEcho(t), harness.MustBuildNative(t, "./filter/native", "liballot.so"))
	resources["guard.yaml"] = guard
	startEnvoyGateway(t, bin, resources)
	r, err := harness.GetEcho(egListener+"/", withForged(http.Header{"x-user-id": {"user-1"}}))
	if err != nil {
		t.Fatal(err)
	}
	egNoAssignment(t, r, "with no Allot filter")
	noForged(t, r)
	if v := r.Header("x-user-id"); len(v) != 1 || v[0] != "user-1" {
		t.Errorf("x-user-id = %q, want [user-1]: the guard removes only assignment headers", v)
	}
}

// egNoAssignment fails if r, the echo of a request, carries any header
// Allot owns (egAssignmentHeader).
func egNoAssignment(t *testing.T, r harness.EchoResponse, what string) {
	t.Helper()
	for name, vals := range r.Headers {
		if egAssignmentHeader.MatchString(strings.ToLower(name)) {
			t.Errorf("%s: the service got %s: %q, want no assignment header", what, name, vals)
		}
	}
}

// egMustRunAllot fails the test unless the admin of Envoy Gateway's Envoy
// (its address in dir/run/<run>/admin-address.txt, written by func-e)
// shows Allot's filter in the listener: the listener's ECDS subscription
// for the filter allot exists, a Wasm VM is active, and the module's own
// stats (wasmcustom.allot.*, defined by its root context) are there.
func egMustRunAllot(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "run", "*", "admin-address.txt"))
	if len(files) != 1 {
		t.Fatalf("the proxy's admin address: want one run/*/admin-address.txt in %s, got %q", dir, files)
	}
	addr, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimSpace(string(addr)) + "/stats"
	harness.MustEventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		stats := map[string]string{}
		module := 0
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			name, value, _ := strings.Cut(sc.Text(), ": ")
			stats[name] = value
			if strings.HasPrefix(name, "wasmcustom.allot.") {
				module++
			}
		}
		if _, ok := stats["extension_config_discovery.http_filter.allot.update_attempt"]; !ok {
			return fmt.Errorf("%s: no extension_config_discovery.http_filter.allot.*: the listener has no filter allot", url)
		}
		if n, _ := strconv.Atoi(stats["wasm.envoy.wasm.runtime.v8.active"]); n < 1 || module == 0 {
			return fmt.Errorf("%s: wasm.envoy.wasm.runtime.v8.active = %q and %d wasmcustom.allot.* stats: Allot's Wasm VM is not running", url, stats["wasm.envoy.wasm.runtime.v8.active"], module)
		}
		t.Logf("the proxy's admin: the listener's filter allot (ECDS update_attempt %s, update_success %s), %s active Wasm VMs, %d wasmcustom.allot.* stats",
			stats["extension_config_discovery.http_filter.allot.update_attempt"], stats["extension_config_discovery.http_filter.allot.update_success"],
			stats["wasm.envoy.wasm.runtime.v8.active"], module)
		return nil
	})
}

// egLoopbackUp sets IFF_UP on lo (SIOCGIFFLAGS, then SIOCSIFFLAGS): a new
// network namespace starts with its loopback down.
func egLoopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr struct { // struct ifreq: the name, then ifr_flags in a 24-byte union
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], "lo")
	for _, req := range []uintptr{syscall.SIOCGIFFLAGS, syscall.SIOCSIFFLAGS} {
		if req == syscall.SIOCSIFFLAGS {
			ifr.flags |= syscall.IFF_UP
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
			return fmt.Errorf("ioctl %#x on lo: %w", req, errno)
		}
	}
	return nil
}

// ecdsResources are ECDS mode's manifests: gateway.yaml routing to echo
// (host:port), envoyproxy-ecds.yaml with allotd's xDS on xdsPort, and
// allot-ecds.yaml loading wasm, with its guard document or without.
func ecdsResources(t *testing.T, echo string, xdsPort int, wasm string, guard bool) map[string]string {
	t.Helper()
	return map[string]string{
		"gateway.yaml":         egGatewayManifest(t, echo),
		"envoyproxy-ecds.yaml": egManifest(t, "envoyproxy-ecds.yaml", map[string]string{"port_value: 18100": "port_value: " + strconv.Itoa(xdsPort)}),
		"allot-ecds.yaml":      egModeFile(t, "allot-ecds.yaml", map[string]string{"/etc/envoy/allot.wasm": wasm}, guard),
	}
}

// nativeResources are gateway.yaml routing to echo and
// envoyproxy-native.yaml registering the module at so: native mode
// without allot-native.yaml (neither the policy nor the guard).
func nativeResources(t *testing.T, echo, so string) map[string]string {
	t.Helper()
	return map[string]string{
		"gateway.yaml":           egGatewayManifest(t, echo),
		"envoyproxy-native.yaml": egManifest(t, "envoyproxy-native.yaml", map[string]string{"/etc/envoy/liballot.so": so}),
	}
}

// egModeDocs splits the shipped mode file name (allot-ecds.yaml,
// allot-native.yaml), with replace applied, into its two documents: Allot's
// policy and the guard, a ClientTrafficPolicy. It fails the test when the
// file is not laid out so.
func egModeDocs(t *testing.T, name string, replace map[string]string) (policy, guard string) {
	t.Helper()
	docs := strings.Split(egManifest(t, name, replace), "\n---\n")
	if len(docs) != 2 || strings.Contains(docs[0], "kind: ClientTrafficPolicy") || !strings.Contains(docs[1], "kind: ClientTrafficPolicy") {
		t.Fatalf("%s/%s: want two documents, Allot's policy then the guard (a ClientTrafficPolicy)", egDeploy, name)
	}
	return docs[0], docs[1]
}

// egModeFile is the shipped mode file name with replace applied, whole
// (guard true) or without its guard document (guard false): then only
// Allot's filter can remove forged assignment headers.
func egModeFile(t *testing.T, name string, replace map[string]string, guard bool) string {
	t.Helper()
	policy, _ := egModeDocs(t, name, replace)
	if guard {
		return egManifest(t, name, replace)
	}
	return policy
}

// egGuard is the guard document of the shipped mode file name.
func egGuard(t *testing.T, name string) string {
	t.Helper()
	_, guard := egModeDocs(t, name, nil)
	return guard
}

// egGatewayManifest is gateway.yaml with its Backend at echo (host:port).
func egGatewayManifest(t *testing.T, echo string) string {
	t.Helper()
	_, port, _ := splitHostPort(echo)
	return egManifest(t, "gateway.yaml", map[string]string{"port: 3000": "port: " + port})
}

// egCheckAssignments sends one request per unit of want through the
// gateway, each with forged assignment headers, and checks that the
// service sees exactly the unit's assignment of experiment key. It returns
// the requests sent per variation.
func egCheckAssignments(t *testing.T, key string, want map[string]string) map[string]int64 {
	t.Helper()
	sent := map[string]int64{}
	for unit, v := range want {
		r, err := harness.GetEcho(egListener+"/", http.Header{"x-user-id": {unit}, "x-experiment-" + key: {"forged"},
			"x-experiment-forged": {"x"}, "x-experiments-version": {"forged"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Header("x-experiment-" + key); len(got) != 1 || got[0] != v {
			t.Errorf("unit %s: x-experiment-%s = %q, want [%s]", unit, key, got, v)
		}
		if got := r.Header("x-experiment-forged"); len(got) != 0 {
			t.Errorf("unit %s: forged x-experiment-forged reached the service: %q", unit, got)
		}
		if got := r.Header("x-experiments-version"); len(got) != 1 || got[0] == "forged" {
			t.Errorf("unit %s: x-experiments-version = %q, want the configuration's", unit, got)
		}
		sent[v]++
	}
	if len(sent) < 2 {
		t.Errorf("%d units all got %v: want both variations", len(want), sent)
	}
	return sent
}

// egManifest is the shipped manifest deploy/envoy-gateway/name with each
// of replace's strings replaced; it fails the test when one is not in the
// file, so the test cannot drift from what ships.
func egManifest(t *testing.T, name string, replace map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, filepath.Join(egDeploy, name)))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, repl := range replace {
		if !strings.Contains(s, old) {
			t.Fatalf("%s/%s no longer holds %q", egDeploy, name, old)
		}
		s = strings.ReplaceAll(s, old, repl)
	}
	return s
}

// startEnvoyGateway is launchEnvoyGateway that waits until the proxy
// serves the example route. It returns Envoy Gateway's directory.
func startEnvoyGateway(t *testing.T, bin string, resources map[string]string) string {
	t.Helper()
	start := time.Now()
	eg, dir := launchEnvoyGateway(t, bin, resources)
	if err := eg.WaitHTTP("http://127.0.0.1:19003/ready", 60*time.Second); err != nil {
		t.Fatalf("Envoy Gateway's proxy: %v", err)
	}
	harness.MustEventually(t, 30*time.Second, func() error {
		_, err := harness.GetEcho(egListener+"/", nil)
		return err
	})
	t.Logf("Envoy Gateway's proxy serves the route %v after start", time.Since(start).Round(time.Millisecond))
	return dir
}

// launchEnvoyGateway runs Envoy Gateway standalone from the shipped
// envoy-gateway.yaml, its directories moved into the test's, watching a
// directory holding resources (file name → manifest). Its Envoy is the
// project's, laid out where func-e looks for the release the EnvoyProxies
// name, so nothing is downloaded. It returns the process and the directory
// of its configuration, resources, state and runtime files.
func launchEnvoyGateway(t *testing.T, bin string, resources map[string]string) (*harness.Process, string) {
	t.Helper()
	dir := t.TempDir()
	resDir, home, run := filepath.Join(dir, "resources"), filepath.Join(dir, "home"), filepath.Join(dir, "run")
	envoy := filepath.Join(home, "data", "envoy-versions", egEnvoyVersion, "bin", "envoy")
	for _, d := range []string{resDir, run, filepath.Dir(envoy)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(harness.MustEnvoyBinary(t), envoy); err != nil {
		t.Fatal(err)
	}
	for name, content := range resources {
		if err := os.WriteFile(filepath.Join(resDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := harness.MustWriteFile(t, "envoy-gateway.yaml", egManifest(t, "envoy-gateway.yaml", map[string]string{
		"/etc/envoy-gateway/resources": resDir, "/var/lib/envoy-gateway": home, "/run/envoy-gateway": run,
	}))
	if out, err := exec.Command(bin, "certgen", "--local", "--config-home", filepath.Join(home, "config")).CombinedOutput(); err != nil {
		t.Fatalf("envoy-gateway certgen --local: %v\n%s", err, out)
	}
	return harness.MustLaunch(t, "envoy-gateway", exec.Command(bin, "server", "--config-path", cfg)), dir
}
