package harness

import (
	"bytes"
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
	"testing"
	"time"
)

const (
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
	// tailLines is how many log lines are shown when a test fails.
	tailLines = 80
	// tailBytes bounds how much of a log file is read to find its tail.
	tailBytes = 256 << 10
)

// Process is a child process started by Launch or MustLaunch. Its stdout
// and stderr go to a log file; it is killed if the test binary (or the
// benchmark) itself dies. MustLaunch's process is stopped (SIGTERM, then
// SIGKILL after 5 s) when the test ends, and if the test failed, the last
// 80 lines of its log are shown.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error // set before done is closed
}

// MustLaunch is Launch for a test: the log goes to t.TempDir()/name.log,
// the test fails if the process does not start, and the process is stopped
// at cleanup. It overwrites cmd.Stdout and cmd.Stderr with the log file.
func MustLaunch(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p := must[*Process](t)(Launch(name, filepath.Join(t.TempDir(), name+".log"), cmd))
	stopAtCleanup(t, p)
	return p
}

// stopAtCleanup stops p when the test ends and, if the test failed, logs
// how p ended and the tail of its log.
func stopAtCleanup(t testing.TB, p *Process) {
	t.Cleanup(func() {
		exitedAlready := p.Exited()
		killed := p.Terminate()
		if t.Failed() {
			state := "stopped at cleanup"
			switch {
			case exitedAlready:
				state = "had exited"
			case killed:
				state = "killed at cleanup after ignoring SIGTERM"
			}
			t.Logf("%s (pid %d, %s, exit: %v) log %s, last %d lines:\n%s",
				p.name, p.Pid(), state, p.waitErr, p.logPath, tailLines, p.LogTail(tailLines))
		}
	})
}

// Launch starts cmd as a Process: its stdout and stderr go to logPath, and
// the kernel kills it if this process dies (Linux). Nothing stops it for
// the caller: call Terminate (or use MustLaunch in a test).
func Launch(name, logPath string, cmd *exec.Cmd) (*Process, error) {
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

// PinnedCommand is the command running bin with args pinned to CPU cpu
// (`taskset -c cpu bin args...`; taskset execs bin, so the process's pid is
// bin's own), or unpinned when cpu is negative.
func PinnedCommand(cpu int, bin string, args ...string) *exec.Cmd {
	if cpu < 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), bin}, args...)...)
}

// Name returns the name given to Launch.
func (p *Process) Name() string { return p.name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the path of the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.logPath }

// Log returns the whole log written so far.
func (p *Process) Log() (string, error) {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "", fmt.Errorf("read %s log: %w", p.name, err)
	}
	return string(b), nil
}

// MustLog is Log that fails the test on error.
func (p *Process) MustLog(t testing.TB) string {
	t.Helper()
	return must[string](t)(p.Log())
}

// LogTail returns the last n lines of the log (fewer if the log is shorter),
// or a note saying why the log could not be read.
func (p *Process) LogTail(n int) string {
	s, err := tailFile(p.logPath, n)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return s
}

// Done returns a channel that is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the process exits and returns its exit error as from
// (*exec.Cmd).Wait: nil for exit status 0.
func (p *Process) Wait() error {
	<-p.done
	return p.waitErr
}

// Signal sends sig to the process. Signalling a process that has exited is
// not an error.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() error {
	err := p.Signal(syscall.SIGKILL)
	<-p.done
	return err
}

// ExitErr is the exit error of a process that has exited (nil while it
// runs, and for exit status 0).
func (p *Process) ExitErr() error {
	if !p.Exited() {
		return nil
	}
	return p.waitErr
}

// MustTerminate is Terminate for a test, which logs when the process
// needed SIGKILL. Use Wait afterwards for the exit status.
func (p *Process) MustTerminate(t testing.TB) {
	t.Helper()
	if p.Terminate() {
		t.Logf("%s did not exit within %v of SIGTERM; killed it", p.name, stopTimeout)
	}
}

// Terminate sends SIGTERM, waits up to 5 s for the process to exit, then
// sends SIGKILL, and reports whether it needed SIGKILL. It returns at once
// if the process has exited, so it may be called more than once, and on a
// nil Process.
func (p *Process) Terminate() (killed bool) {
	if p == nil || p.Exited() {
		return false
	}
	_ = p.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return false
	case <-timer.C:
	}
	_ = p.Kill()
	return true
}

// WaitHTTP polls url with GET every 20 ms until it answers with a 2xx
// status. It returns an error if timeout passes first or if the process
// exits meanwhile.
func (p *Process) WaitHTTP(url string, timeout time.Duration) error {
	return p.WaitHTTPWith(Client, url, timeout)
}

// MustWaitHTTP is WaitHTTP that fails the test on error.
func (p *Process) MustWaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	if err := p.WaitHTTP(url, timeout); err != nil {
		t.Fatal(err)
	}
}

// WaitHTTPWith is WaitHTTP through c, e.g. a client trusting the
// process's TLS certificate.
func (p *Process) WaitHTTPWith(c *http.Client, url string, timeout time.Duration) error {
	return p.wait(url, timeout, func() error { return get2xx(c, url) })
}

// MustWaitHTTPWith is WaitHTTPWith that fails the test on error.
func (p *Process) MustWaitHTTPWith(t testing.TB, c *http.Client, url string, timeout time.Duration) {
	t.Helper()
	if err := p.WaitHTTPWith(c, url, timeout); err != nil {
		t.Fatal(err)
	}
}

// WaitTCP waits until addr ("127.0.0.1:port") accepts connections. It
// returns an error, with the tail of the log, if the process exits first,
// or if timeout passes.
func (p *Process) WaitTCP(addr string, timeout time.Duration) error {
	return p.wait(addr, timeout, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// wait calls check every 20 ms until it returns nil, the process exits or
// timeout passes; what names what is waited for.
func (p *Process) wait(what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited (%v) before %s answered; last error: %v\n%s", p.name, p.waitErr, what, last, p.LogTail(20))
		}
		last = check()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer within %v: %w", p.name, what, timeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// Client is the HTTP client of every request the harness makes, and of
// the benchmark's. It never uses a proxy from the environment: all traffic
// stays on 127.0.0.1.
var Client = &http.Client{
	Timeout: 10 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	},
}

// get2xx GETs url through c and returns an error unless the status is 2xx.
func get2xx(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// get returns the body of a GET of url, failing unless the status is 200.
func get(url string) ([]byte, error) {
	return do(http.MethodGet, url)
}

func do(method, url string) ([]byte, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := max(fi.Size()-tailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}
