package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/e2e/harness"
)

// client talks to Envoy's admin and the pre-flight requests; never through a
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

// envoy is a running Envoy with its admin and listener addresses.
type envoy struct {
	*harness.Process
	admin, listener string
	ready           time.Duration // from start to /ready LIVE
	args            []string
}

// startEnvoy runs Envoy with bootstrap on CPU cpu, env added to its
// environment, and waits for /ready and the listener's bound port.
func startEnvoy(ctx context.Context, bin, dir, name, bootstrapPath string, concurrency, cpu int, env []string, extra ...string) (*envoy, error) {
	adminPath := filepath.Join(dir, name+".admin")
	os.Remove(adminPath)
	args := []string{"-c", bootstrapPath, "--concurrency", strconv.Itoa(concurrency),
		"--disable-hot-restart", "--use-dynamic-base-id", "--admin-address-path", adminPath,
		"-l", "warning", "--drain-time-s", "0", "--drain-strategy", "immediate"}
	args = append(args, extra...)
	start := time.Now()
	p, err := startProc(name, filepath.Join(dir, name+".log"), cpu, env, bin, args...)
	if err != nil {
		return nil, err
	}
	e := &envoy{Process: p, args: args}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.Exited() {
			return nil, fmt.Errorf("envoy %s exited before ready: %v\n%s", name, exitErr(p), p.LogTail(20))
		}
		if err := e.checkReady(adminPath); err == nil {
			e.ready = time.Since(start)
			break
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			p.Terminate()
			return nil, fmt.Errorf("envoy %s not ready: %v\n%s", name, err, p.LogTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.findListener(); err != nil {
		p.Terminate()
		return nil, err
	}
	return e, nil
}

func (e *envoy) checkReady(adminPath string) error {
	if e.admin == "" {
		b, err := os.ReadFile(adminPath)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return errors.New("admin address not written yet")
		}
		e.admin = "http://" + string(bytes.TrimSpace(b))
	}
	b, err := get(e.admin + "/ready")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) != "LIVE" {
		return fmt.Errorf("state %q", b)
	}
	return nil
}

func (e *envoy) findListener() error {
	b, err := get(e.admin + "/listeners?format=json")
	if err != nil {
		return err
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
	if err := json.Unmarshal(b, &l); err != nil || len(l.ListenerStatuses) == 0 {
		return fmt.Errorf("envoy listeners: %v: %s", err, b)
	}
	a := l.ListenerStatuses[0].LocalAddress.SocketAddress
	e.listener = net.JoinHostPort(a.Address, strconv.Itoa(a.PortValue))
	return nil
}

// stat returns one counter or gauge from the admin's /stats (0 when
// absent).
func (e *envoy) stat(name string) int64 {
	st, err := harness.AdminStats(e.admin, "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return 0
	}
	return st[name]
}

func get(url string) ([]byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return b, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, nil
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
