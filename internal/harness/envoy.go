package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// envoyVersion is the Envoy release the project pins (see the Makefile).
	envoyVersion = "1.40."
	// envoyReadyTimeout bounds how long StartEnvoy waits for /ready.
	envoyReadyTimeout = 30 * time.Second
	// defaultNode and defaultCluster are the --service-node and
	// --service-cluster used when EnvoyOptions leaves them empty.
	defaultNode    = "allot-e2e"
	defaultCluster = "allot-e2e"
)

var envoyChecks sync.Map // binary path → *envoyCheck

type envoyCheck struct {
	once sync.Once
	err  error
}

// EnvoyBinary returns the Envoy binary to test against: $ENVOY_BIN if set,
// else <repo>/.venv/bin/envoy (installed by `make envoy`). The test fails, and
// is never skipped, when the binary is missing or is not Envoy 1.40.x: CI
// must not pass by running no e2e test. The version is checked once per
// process.
func EnvoyBinary(t testing.TB) string {
	t.Helper()
	bin, source := os.Getenv("ENVOY_BIN"), "$ENVOY_BIN"
	if bin == "" {
		bin, source = filepath.Join(repoRoot(t), ".venv", "bin", "envoy"), "the project venv"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("envoy binary from %s not found: %v\n"+
			"run `make envoy` (or `make test`, which installs it into .venv), or set ENVOY_BIN", source, err)
	}
	v, _ := envoyChecks.LoadOrStore(bin, &envoyCheck{})
	c := v.(*envoyCheck)
	c.once.Do(func() { c.err = checkEnvoyVersion(bin) })
	if c.err != nil {
		t.Fatal(c.err)
	}
	return bin
}

func checkEnvoyVersion(bin string) error {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("run %s --version: %w\n%s", bin, err, out)
	}
	if !bytes.Contains(out, []byte("/"+envoyVersion)) {
		return fmt.Errorf("%s is not Envoy %sx: %s\nrun `make envoy` or point ENVOY_BIN at Envoy %sx",
			bin, envoyVersion, bytes.TrimSpace(out), envoyVersion)
	}
	return nil
}

// EnvoyOptions configures StartEnvoy.
type EnvoyOptions struct {
	// Bootstrap is the path of the bootstrap YAML (see RenderBootstrap).
	Bootstrap string
	// AdminPort is the admin listener's port as written in the bootstrap. If
	// zero, the bootstrap should use port_value: 0 and the harness reads the
	// bound address from the file Envoy writes with --admin-address-path.
	AdminPort int
	// Node is --service-node, the xDS node id; default "allot-e2e". A
	// non-default node also names the log file (envoy-<node>.log).
	Node string
	// Cluster is --service-cluster; default "allot-e2e".
	Cluster string
	// Concurrency is --concurrency, the number of worker threads; default 1.
	Concurrency int
	// LogLevel is -l; default "warning".
	LogLevel string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Envoy is a running Envoy. Its Process methods (Stop, Kill, Pid, LogTail, ...)
// apply to the envoy process.
type Envoy struct {
	*Process
	adminURL string
}

// StartEnvoy starts Envoy (see EnvoyBinary) with opts and waits up to 30 s
// until the admin /ready endpoint answers 200 "LIVE". It fails fast if Envoy
// exits first. Envoy runs with --disable-hot-restart and --use-dynamic-base-id,
// so instances share no memory and leave nothing in /dev/shm, and with
// --drain-time-s 0 --drain-strategy immediate, so it stops at once. Envoy is
// stopped when the test ends.
func StartEnvoy(t testing.TB, opts EnvoyOptions) *Envoy {
	t.Helper()
	bin := EnvoyBinary(t)
	if opts.Bootstrap == "" {
		t.Fatal("StartEnvoy: EnvoyOptions.Bootstrap is empty")
	}
	if _, err := os.Stat(opts.Bootstrap); err != nil {
		t.Fatalf("StartEnvoy: bootstrap: %v", err)
	}
	opts = opts.withDefaults()

	dir := t.TempDir()
	adminPath := filepath.Join(dir, "admin-address")
	args := opts.args(adminPath)
	name := "envoy"
	if opts.Node != defaultNode {
		name += "-" + opts.Node
	}
	e := &Envoy{Process: StartProcess(t, name, bin, args...)}

	deadline := time.Now().Add(envoyReadyTimeout)
	var last error
	for {
		if e.Exited() {
			// The cleanup registered by StartProcess logs the tail.
			t.Fatalf("%s exited before ready (%v); last error: %v", e.Name(), e.waitErr, last)
		}
		last = e.ready(opts.AdminPort, adminPath)
		if last == nil {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %v: %v", e.Name(), envoyReadyTimeout, last)
		}
		select {
		case <-e.Done():
		case <-time.After(pollInterval):
		}
	}
}

// args is Envoy's command line for o, its admin address written to
// adminPath. --service-node and --service-cluster are passed when set
// (StartEnvoy always sets them; LaunchEnvoy only when asked).
func (o EnvoyOptions) args(adminPath string) []string {
	args := []string{
		"-c", o.Bootstrap,
		// Hot restart is what shares memory between Envoys on one host; with
		// it disabled nothing is created in /dev/shm (with it enabled, every
		// run would leave a segment behind). The dynamic base id keeps
		// instances apart even if ExtraArgs or a future change enable it.
		"--disable-hot-restart",
		"--use-dynamic-base-id",
		"--admin-address-path", adminPath,
	}
	if o.Node != "" {
		args = append(args, "--service-node", o.Node)
	}
	if o.Cluster != "" {
		args = append(args, "--service-cluster", o.Cluster)
	}
	args = append(args,
		"--concurrency", strconv.Itoa(o.Concurrency),
		"-l", o.LogLevel,
		"--drain-time-s", "0",
		"--drain-strategy", "immediate",
	)
	return append(args, o.ExtraArgs...)
}

func (o EnvoyOptions) withDefaults() EnvoyOptions {
	if o.Node == "" {
		o.Node = defaultNode
	}
	if o.Cluster == "" {
		o.Cluster = defaultCluster
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.LogLevel == "" {
		o.LogLevel = "warning"
	}
	return o
}

// ready resolves the admin address and checks /ready once.
func (e *Envoy) ready(adminPort int, adminPath string) error {
	if e.adminURL == "" {
		if adminPort != 0 {
			e.adminURL = "http://127.0.0.1:" + strconv.Itoa(adminPort)
		} else {
			b, err := os.ReadFile(adminPath)
			if err != nil || len(bytes.TrimSpace(b)) == 0 {
				return fmt.Errorf("admin address not written yet to %s", adminPath)
			}
			e.adminURL = "http://" + string(bytes.TrimSpace(b))
		}
	}
	body, err := get(e.adminURL + "/ready")
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(body)); s != "LIVE" {
		return fmt.Errorf("GET %s/ready: state %q, want LIVE", e.adminURL, s)
	}
	return nil
}

// AdminURL returns the base URL of the admin interface, "http://127.0.0.1:port".
func (e *Envoy) AdminURL() string { return e.adminURL }

// Admin sends method (GET, POST) to the admin path (e.g. "/reset_counters")
// and returns the body; the test fails unless the status is 200.
func (e *Envoy) Admin(t testing.TB, method, path string) []byte {
	t.Helper()
	body, err := do(method, e.adminURL+path)
	if err != nil {
		t.Fatalf("envoy admin: %v", err)
	}
	return body
}

// ConfigDump returns the JSON of the admin /config_dump (with EDS).
func (e *Envoy) ConfigDump(t testing.TB) []byte {
	t.Helper()
	return e.Admin(t, http.MethodGet, "/config_dump?include_eds")
}

// Stats returns every counter and gauge from the admin /stats endpoint by
// name, e.g. "server.live" or "http.ingress_http.downstream_rq_total".
// Histograms and text readouts are left out.
func (e *Envoy) Stats(t testing.TB) map[string]int64 {
	t.Helper()
	stats, err := parseStats(e.Admin(t, http.MethodGet, "/stats?format=json"))
	if err != nil {
		t.Fatalf("envoy stats: %v", err)
	}
	return stats
}

// Stat returns the counter or gauge name and whether Envoy has it.
func (e *Envoy) Stat(t testing.TB, name string) (int64, bool) {
	t.Helper()
	v, ok := e.Stats(t)[name]
	return v, ok
}

// RSS returns the resident set size of the Envoy process in bytes, from
// VmRSS in /proc/<pid>/status (Linux only).
func (e *Envoy) RSS(t testing.TB) int64 {
	t.Helper()
	rss, err := readRSS(e.Pid())
	if err != nil {
		t.Fatalf("envoy rss: %v", err)
	}
	return rss
}

// parseStats decodes the JSON form of /stats: {"stats":[{"name":..,"value":..},
// {"histograms":..}]}. Entries without an integer value are skipped.
func parseStats(body []byte) (map[string]int64, error) {
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode stats json: %w", err)
	}
	stats := make(map[string]int64, len(doc.Stats))
	for _, s := range doc.Stats {
		if s.Name == "" {
			continue
		}
		if v, err := strconv.ParseInt(string(s.Value), 10, 64); err == nil {
			stats[s.Name] = v
		}
	}
	return stats, nil
}

// readRSS returns VmRSS of pid in bytes.
func readRSS(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected VmRSS line %q", path, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: parse VmRSS: %w", path, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("%s: no VmRSS line (process exited?)", path)
}
