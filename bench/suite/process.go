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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// client talks to Envoy's admin and the pre-flight requests; never through a
// proxy from the environment.
var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

// proc is a child process the suite started. Stop is idempotent; every
// started proc is stopped by the suite before it returns, and each child
// gets SIGKILL if the suite itself dies (Pdeathsig).
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   string
	done  chan struct{}
	err   error
	start time.Time
}

func startProc(name, logPath string, cpu int, bin string, args ...string) (*proc, error) {
	if cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// pid is the process id; taskset execs its command, so it is the pinned
// program's own id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after 5 s.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// envoy is a running Envoy with its admin and listener addresses.
type envoy struct {
	*proc
	admin, listener string
	ready           time.Duration // from start to /ready LIVE
	args            []string
}

// startEnvoy runs Envoy with bootstrap on CPU cpu and waits for /ready and
// the listener's bound port.
func startEnvoy(ctx context.Context, bin, dir, name, bootstrapPath string, concurrency, cpu int, extra ...string) (*envoy, error) {
	adminPath := filepath.Join(dir, name+".admin")
	os.Remove(adminPath)
	args := []string{"-c", bootstrapPath, "--concurrency", strconv.Itoa(concurrency),
		"--disable-hot-restart", "--use-dynamic-base-id", "--admin-address-path", adminPath,
		"-l", "warning", "--drain-time-s", "0", "--drain-strategy", "immediate"}
	args = append(args, extra...)
	p, err := startProc(name, filepath.Join(dir, name+".log"), cpu, bin, args...)
	if err != nil {
		return nil, err
	}
	e := &envoy{proc: p, args: args}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.exited() {
			return nil, fmt.Errorf("envoy %s exited before ready: %v\n%s", name, p.err, p.tail(20))
		}
		if err := e.checkReady(adminPath); err == nil {
			e.ready = time.Since(p.start)
			break
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("envoy %s not ready: %v\n%s", name, err, p.tail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.findListener(); err != nil {
		p.stop()
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

// stat returns one counter from /stats (0 when absent).
func (e *envoy) stat(name string) int64 {
	b, err := get(e.admin + "/stats?filter=^" + name + "$")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && k == name {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
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

// rssBytes returns VmRSS of pid.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

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
func waitTCP(addr string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s: %w", p.name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
