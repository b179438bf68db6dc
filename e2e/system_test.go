//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/nativemod"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// The tokens every e2e system is started with: an admin (the API calls of
// the tests), an owner of namespace team-a and a reader (the web console's
// tests sign in with them).
const (
	adminToken  = "e2e-admin-token-0123456789"
	ownerToken  = "e2e-alice-token-0123456789"
	readerToken = "e2e-reader-token-0123456789"
	// bobToken is an owner of namespace team-b.
	bobToken = "e2e-bob-token-0123456789"
)

// artifact is one of the filter's two builds, the native one on each of
// its request paths. Every e2e test of filter behaviour runs against each
// (forArtifacts); a system's proxies run the artifact it was started for.
type artifact struct {
	// name names the subtests: "wasm", "native" (the warm path on, the
	// default) or "native-go" (the warm path off: every request through
	// Go).
	name    string
	sidecar string // bootstraps in envoy-configs/ (their node metadata allot.artifact names the build)
	gateway string
	routing string
	// native is whether it is the dynamic module; warm is then the
	// nativemod.WarmEnv value in Envoy's environment ("": the default).
	native bool
	warm   string
}

var (
	wasmArtifact = artifact{name: "wasm", sidecar: "envoy-configs/sidecar.yaml", gateway: "envoy-configs/gateway.yaml",
		routing: "envoy-configs/gateway-routing.yaml"}
	nativeArtifact = artifact{name: "native", sidecar: "envoy-configs/sidecar-native.yaml",
		gateway: "envoy-configs/gateway-native.yaml", routing: "envoy-configs/gateway-routing-native.yaml", native: true}
	nativeGoArtifact = artifact{name: "native-go", sidecar: nativeArtifact.sidecar, gateway: nativeArtifact.gateway,
		routing: nativeArtifact.routing, native: true, warm: "0"}
	artifacts = []artifact{wasmArtifact, nativeArtifact, nativeGoArtifact}
	// nativeArtifacts are the native module on each of its request paths.
	nativeArtifacts = []artifact{nativeArtifact, nativeGoArtifact}
	// reliabilityArtifacts are those the reliability suite's long runs
	// loop over: native-go's request path is native's on every request
	// the warm path does not serve (a miss, a forged header, a hostile
	// request), and a third soak would add minutes to the suite.
	reliabilityArtifacts = []artifact{wasmArtifact, nativeArtifact}
)

// forArtifacts runs f once per artifact, as subtests named for it.
func forArtifacts(t *testing.T, f func(t *testing.T, a artifact)) { forEachArtifact(t, artifacts, f) }

// forEachArtifact runs f once per artifact of as, as subtests named for it.
func forEachArtifact(t *testing.T, as []artifact, f func(t *testing.T, a artifact)) {
	for _, a := range as {
		t.Run(a.name, func(t *testing.T) { f(t, a) })
	}
}

// env is what the artifact adds to Envoy's environment: for the native
// module, its warm path switch, set even to its default so that the
// switch in the test's own environment does not leak in.
func (a artifact) env() []string {
	if !a.native {
		return nil
	}
	return []string{nativemod.WarmEnv + "=" + a.warm}
}

// system is one running Allot deployment: allotd on a fresh bbolt file, the
// echo upstream, and one sidecar Envoy per cluster.
type system struct {
	t         *testing.T
	art       artifact
	adminURL  string
	xdsPort   int
	wasm      string
	native    string // the dynamic module
	allotd    *harness.Process
	echoAddr  string
	tokenFile string
	dbPath    string
	adminPort int
	args      []string // extra allotd flags, kept for restarts
	// https, when set, reaches an admin listener serving TLS (-tls-cert):
	// the admin URL is https and every call goes through it.
	https *http.Client
}

// startSystem builds and starts allotd and the echo upstream; its proxies
// run the Wasm module.
func startSystem(t *testing.T, allotdArgs ...string) *system {
	t.Helper()
	return startSystemFor(t, wasmArtifact, allotdArgs...)
}

// startSystemFor is startSystem for proxies running artifact a.
func startSystemFor(t *testing.T, a artifact, allotdArgs ...string) *system {
	t.Helper()
	s := prepareSystem(t, a)
	s.xdsPort = harness.MustFreePort(t)
	s.adminPort = harness.MustFreePort(t)
	s.args = allotdArgs
	s.startAllotd()
	return s
}

// prepareSystem is startSystemFor without starting allotd: the builds,
// tokens and echo upstream that several allotd replicas share.
func prepareSystem(t *testing.T, a artifact) *system {
	t.Helper()
	dir := t.TempDir()
	s := &system{t: t, art: a, wasm: harness.MustBuildWasm(t, "./filter"), dbPath: filepath.Join(dir, "allot.db")}
	s.native = harness.MustBuildNative(t, "./filter/native", "liballot.so")
	s.tokenFile = filepath.Join(dir, "tokens.json")
	tokens := fmt.Sprintf(`{"tokens":[{"name":"e2e","role":"admin","token":%q},
		{"name":"alice","role":"owner","namespaces":["team-a"],"token":%q},
		{"name":"bob","role":"owner","namespaces":["team-b"],"token":%q},
		{"name":"dash","role":"reader","token":%q}]}`, adminToken, ownerToken, bobToken, readerToken)
	if err := os.WriteFile(s.tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s.echoAddr = harness.MustStartEcho(t)
	return s
}

// startAllotd (re)starts allotd on the system's store and ports.
func (s *system) startAllotd() {
	s.t.Helper()
	bin := harness.MustBuild(s.t, "./control-plane/cmd/allotd")
	adminPort, extra := s.adminPort, s.args
	scheme := "http"
	if s.https != nil {
		scheme = "https"
	}
	s.adminURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, adminPort)
	a := harness.Allotd{
		Admin: fmt.Sprintf("127.0.0.1:%d", adminPort), XDS: fmt.Sprintf("127.0.0.1:%d", s.xdsPort),
		DB: s.dbPath, Tokens: s.tokenFile, Wasm: s.wasm, Native: s.native, LogLevel: "debug", Extra: extra,
	}
	if slices.Contains(extra, "-store") {
		a.DB = "" // a replica on etcd, its -store among extra
	}
	s.allotd = harness.MustLaunchAllotd(s.t, "allotd", bin, a)
	s.allotd.MustWaitHTTPWith(s.t, s.client(), s.adminURL+"/readyz", 15*time.Second)
}

// proxy is one Envoy started from a bootstrap in envoy-configs/.
type proxy struct {
	*harness.Envoy
	URL       string // the listener, e.g. http://127.0.0.1:PORT
	AccessLog string // the access log file
	Node      string // its node id
	sent      atomic.Int64
}

// startSidecar starts Envoy with the system's artifact's sidecar bootstrap
// (envoy-configs/sidecar.yaml or sidecar-native.yaml) for cluster.
func (s *system) startSidecar(node, cluster string) *proxy {
	s.t.Helper()
	_, echoPort, _ := splitHostPort(s.echoAddr)
	return startEnvoy(s.t, s.art.sidecar, s.xdsPort, s.filter(), s.art.env(), node, cluster, map[string]string{
		"port_value: 8081": "port_value: " + echoPort,
	})
}

// filter is the path of the system's artifact's build.
func (s *system) filter() string {
	if s.art.native {
		return s.native
	}
	return s.wasm
}

// startEnvoy starts Envoy from a bootstrap in envoy-configs/, moving its
// fixed ports (listener 10000, admin 9901, xDS 18000) and paths (the filter
// module — bin/allot.wasm, or bin/liballot.so when filter is a .so — and
// the access log) to per-test values; replace moves the rest. env is added
// to Envoy's environment (artifact.env).
func startEnvoy(t *testing.T, bootstrap string, xdsPort int, filter string, env []string, node, cluster string, replace map[string]string) *proxy {
	t.Helper()
	return startEnvoyWith(t, harness.EnvoyOptions{}, bootstrap, xdsPort, filter, env, node, cluster, replace)
}

// startEnvoyWith is startEnvoy taking the Envoy binary and the ready
// timeout from o (zero: the project's Envoy, harness.EnvoyBinary, and the
// harness's default).
func startEnvoyWith(t *testing.T, o harness.EnvoyOptions, bootstrap string, xdsPort int, filter string, env []string, node, cluster string, replace map[string]string) *proxy {
	t.Helper()
	listen, admin := harness.MustFreePort(t), harness.MustFreePort(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	boot := harness.ConfigBootstrap{Path: bootstrap, Listener: listen, Admin: admin, XDS: xdsPort,
		Module: filter, AccessLog: accessLog, Replace: replace}.MustRender(t)
	e := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{
		Bin: o.Bin, Timeout: o.Timeout, Bootstrap: boot, AdminPort: admin, Node: node, Cluster: cluster, Env: env,
		ExtraArgs: []string{"--file-flush-interval-msec", "100"},
	})
	return &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen), AccessLog: accessLog, Node: node}
}

func splitHostPort(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return addr, "", fmt.Errorf("no port in %q", addr)
}

// client is the HTTP client that reaches the admin API.
func (s *system) client() *http.Client {
	if s.https != nil {
		return s.https
	}
	return http.DefaultClient
}

// api calls the admin API with the admin token and decodes a JSON answer
// into out (if non-nil). It returns the status code.
func (s *system) api(method, path string, body any, out any) int {
	s.t.Helper()
	code, b, err := adminCall(s.client(), s.adminURL, method, path, body, out)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	if code >= 300 {
		s.t.Logf("%s %s: %d %s", method, path, code, b)
	}
	return code
}

// adminCall calls the admin API at base (e.g. http://127.0.0.1:PORT) with
// the admin token and decodes a JSON answer into out (if non-nil). It
// returns the status code and the body, or an error if no answer came or it
// did not decode. It fails no test, so goroutines other than the test's can
// call it.
func adminCall(client *http.Client, base, method, path string, body, out any) (int, []byte, error) {
	return adminCallAs(client, base, adminToken, method, path, body, out)
}

// adminCallAs is adminCall with another token.
func adminCallAs(client *http.Client, base, token, method, path string, body, out any) (int, []byte, error) {
	return harness.AdminCall(context.Background(), client, base, token, method, path, body, out)
}

// mustAPI is api that fails the test unless the status is want.
func (s *system) mustAPI(want int, method, path string, body any, out any) {
	s.t.Helper()
	if got := s.api(method, path, body, out); got != want {
		s.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// get sends one request through a proxy with the given headers.
func (p *proxy) get(headers map[string][]string) (harness.EchoResponse, error) {
	return p.getPath("/", headers)
}

// getPath sends one request for path through a proxy.
func (p *proxy) getPath(path string, headers map[string][]string) (harness.EchoResponse, error) {
	p.sent.Add(1)
	return harness.GetEcho(p.URL+path, http.Header(headers))
}

// settledStats waits until Envoy's stats account for every request sent
// through p (the filter flushes its counters on a tick), each evaluated or
// failed open, and returns them.
func (p *proxy) settledStats(t *testing.T) map[string]int64 {
	t.Helper()
	var stats map[string]int64
	harness.MustEventually(t, 5*time.Second, func() error {
		stats = p.MustStats(t)
		evaluated, failOpen := stats["wasmcustom."+wire.MetricEvaluated], stats["wasmcustom."+wire.MetricFailOpen]
		if got, want := evaluated+failOpen, p.sent.Load(); got != want {
			return fmt.Errorf("envoy counted %d evaluated and %d failed-open requests, %d were sent", evaluated, failOpen, want)
		}
		return nil
	})
	return stats
}

// repoPath is path (relative to the repository root) made absolute.
func repoPath(t *testing.T, path string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, path)
}

// userIDs returns n unit ids: user-0000, user-0001, ...
func userIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%04d", i)
	}
	return ids
}

// assignments is the engine's own assignment (the oracle) of def, a single
// experiment, for each unit.
func assignments(t *testing.T, def map[string]any, units []string) map[string]string {
	t.Helper()
	set := compile(t, def)
	out := make(map[string]string, len(units))
	for _, u := range units {
		out[u] = set.Assign(nil, engine.Attributes{"id": u})[0].Value
	}
	return out
}

// metricValue returns the value of one series of s's /metrics, as
// written there with its labels (0 if absent).
func metricValue(t *testing.T, s *system, series string) float64 {
	t.Helper()
	resp, err := s.client().Get(s.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}
