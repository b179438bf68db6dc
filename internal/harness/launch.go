package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The helpers in this file need no testing.TB: they return errors, and the
// processes they start are the caller's to stop. They serve the benchmark
// (bench/suite), which runs outside any test, as much as the tests.

// Launch starts cmd as a Process outside a test: its stdout and stderr go to
// logPath, and the kernel kills it if this process dies (Linux). Nothing
// stops it for the caller: call Terminate.
func Launch(name, logPath string, cmd *exec.Cmd) (*Process, error) {
	return launch(name, logPath, cmd)
}

// launch starts cmd logging to logPath; StartCmd and Launch share it.
func launch(name, logPath string, cmd *exec.Cmd) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdout = f
	cmd.Stderr = f
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Terminate stops the process as Stop does (SIGTERM, then SIGKILL after
// 5 s) and reports whether it needed SIGKILL. It returns at once if the
// process has exited, so it may be called more than once.
func (p *Process) Terminate() (killed bool) {
	if p == nil {
		return false
	}
	return p.terminate()
}

// PinnedCommand is the command running bin with args pinned to CPU cpu
// (`taskset -c cpu bin args...`; taskset execs bin, so the process's pid is
// bin's own), or unpinned when cpu is negative.
func PinnedCommand(cpu int, bin string, args ...string) *exec.Cmd {
	if cpu < 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), bin}, args...)...)
}

// ReadRSS returns the resident set size (VmRSS) of process pid in bytes,
// from /proc/<pid>/status (Linux only).
func ReadRSS(pid int) (int64, error) { return readRSS(pid) }

// AdminStats returns the counters and gauges of the Envoy whose admin
// interface is at adminURL ("http://127.0.0.1:port"), by name; filter, when
// not empty, is the admin's regular expression over the names (e.g.
// `^wasmcustom\.allot\.`), which spares Envoy rendering the rest.
func AdminStats(adminURL, filter string) (map[string]int64, error) {
	u := adminURL + "/stats?format=json"
	if filter != "" {
		u += "&filter=" + url.QueryEscape(filter)
	}
	body, err := get(u)
	if err != nil {
		return nil, err
	}
	return parseStats(body)
}

// GoBuildTo runs `go build flags... -o out pkg` in the module directory dir
// with env ("KEY=value") added to the environment. Unlike Build it needs no
// test, writes where it is told and caches nothing.
func GoBuildTo(ctx context.Context, dir, out, pkg string, flags []string, env ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build %s: go command not in PATH: %w", pkg, err)
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s go %s: %w\n%s", strings.Join(env, " "), strings.Join(args, " "), err, msg)
	}
	return nil
}

// CSharedFlags are the compiler flags BuildCShared passes: an optimized,
// position-independent shared object.
var CSharedFlags = []string{"-O2", "-shared", "-fPIC"}

// BuildCShared compiles the C sources srcs into the shared object out
// (`cc -O2 -shared -fPIC -o out srcs...`, with cc $CC or gcc), run in dir.
func BuildCShared(ctx context.Context, dir, out string, srcs ...string) error {
	cc := cmp.Or(os.Getenv("CC"), "gcc")
	args := append(append(append([]string(nil), CSharedFlags...), "-o", out), srcs...)
	cmd := exec.CommandContext(ctx, cc, args...)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cc, strings.Join(args, " "), err, msg)
	}
	return nil
}

// LaunchOptions configures LaunchEnvoy: Envoy's own options as for
// StartEnvoy, except that Node and Cluster are passed only when set, and
// what a test would otherwise provide.
type LaunchOptions struct {
	EnvoyOptions
	// Bin is the Envoy binary (see EnvoyBinary for a test's).
	Bin string
	// Name names the log and the admin-address file, Dir holds them.
	Name, Dir string
	// CPU pins Envoy to one CPU (PinnedCommand); negative: not pinned.
	CPU int
	// Env is added to Envoy's environment.
	Env []string
	// Timeout bounds the wait for /ready; default 30 s.
	Timeout time.Duration
}

// LaunchEnvoy starts Envoy as StartEnvoy does, outside a test, and waits
// until /ready answers LIVE, Envoy exits, ctx ends or the timeout passes;
// on any of the last three it stops Envoy and returns an error with the
// log's tail. The caller stops the Envoy it returns (Terminate).
func LaunchEnvoy(ctx context.Context, o LaunchOptions) (*Envoy, error) {
	opts := o.EnvoyOptions
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warning"
	}
	adminPath := filepath.Join(o.Dir, o.Name+".admin")
	os.Remove(adminPath)
	cmd := PinnedCommand(o.CPU, o.Bin, opts.args(adminPath)...)
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	p, err := Launch(o.Name, filepath.Join(o.Dir, o.Name+".log"), cmd)
	if err != nil {
		return nil, err
	}
	e := &Envoy{Process: p}
	deadline := time.Now().Add(cmp.Or(o.Timeout, envoyReadyTimeout))
	for {
		if e.Exited() {
			return nil, fmt.Errorf("envoy %s exited before ready: %v\n%s", o.Name, e.Wait(), e.LogTail(20))
		}
		err := e.ready(opts.AdminPort, adminPath)
		if err == nil {
			return e, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.Terminate()
			return nil, fmt.Errorf("envoy %s not ready: %v\n%s", o.Name, cmp.Or(ctx.Err(), err), e.LogTail(20))
		}
		select {
		case <-ctx.Done():
		case <-e.Done():
		case <-time.After(pollInterval):
		}
	}
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
