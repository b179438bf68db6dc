package suite

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// client sends the pre-flight requests and allotd's admin calls; never through a
// proxy from the environment.
var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

// startProc starts bin with args pinned to CPU cpu (unpinned when cpu is
// negative), its output in logPath and env added to its environment. The
// suite stops every process it started (Terminate) before it returns, and
// the kernel kills each if the suite itself dies (harness.Launch).
func startProc(name, logPath string, cpu int, env []string, bin string, args ...string) (*harness.Process, error) {
	cmd := harness.PinnedCommand(cpu, bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return harness.Launch(name, logPath, cmd)
}

// exitErr is an exited process's exit error.
func exitErr(p *harness.Process) error {
	if !p.Exited() {
		return nil
	}
	return p.Wait()
}

// envoy is a running Envoy (harness.LaunchEnvoy) with its listener's
// address.
type envoy struct {
	*harness.Envoy
	listener string
	ready    time.Duration // from start to /ready LIVE
}

// startEnvoy runs Envoy with bootstrap on CPU cpu, env added to its
// environment and extra arguments, and waits for /ready and the listener's
// bound port; its log and admin address go to dir.
func startEnvoy(ctx context.Context, bin, dir, name, bootstrapPath string, concurrency, cpu int, env []string, extra ...string) (*envoy, error) {
	start := time.Now()
	h, err := harness.LaunchEnvoy(ctx, harness.LaunchOptions{Bin: bin, Name: name, Dir: dir, CPU: cpu, Env: env,
		Timeout: 60 * time.Second, EnvoyOptions: harness.EnvoyOptions{Bootstrap: bootstrapPath, Concurrency: concurrency, ExtraArgs: extra}})
	if err != nil {
		return nil, err
	}
	e := &envoy{Envoy: h, ready: time.Since(start)}
	if e.listener, err = h.Listener(); err != nil {
		h.Terminate()
		return nil, err
	}
	return e, nil
}

// stat returns one counter or gauge from the admin's /stats (0 when
// absent).
func (e *envoy) stat(name string) int64 {
	st, err := harness.AdminStats(e.AdminURL(), "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return 0
	}
	return st[name]
}

// cpuTicks returns utime+stime of pid in clock ticks (USER_HZ, 100/s).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces) start at
	// state (field 3); utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

const tickSeconds = 0.01

// freePort returns a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, p *harness.Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.Name(), exitErr(p), p.LogTail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s: %w", p.Name(), addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
