package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// Process is a child process started by StartProcess or StartCmd. Its stdout
// and stderr go to a log file in the test's temporary directory; if the test
// fails, the last 80 lines of that log are shown. It is stopped (SIGTERM, then
// SIGKILL after 5 s) when the test ends, and is killed if the test binary
// itself dies.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error // set before done is closed
}

// StartProcess starts bin with args, logging to t.TempDir()/name.log.
func StartProcess(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	return StartCmd(t, name, exec.Command(bin, args...))
}

// StartCmd starts a prepared command (for callers that need Env or Dir) as a
// Process. It overwrites cmd.Stdout and cmd.Stderr with the log file.
func StartCmd(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p, err := launch(name, filepath.Join(t.TempDir(), name+".log"), cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exitedAlready := p.Exited()
		killed := p.terminate()
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
	return p
}

// Name returns the name given to StartProcess.
func (p *Process) Name() string { return p.name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the path of the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.logPath }

// Log returns the whole log written so far.
func (p *Process) Log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatalf("read %s log: %v", p.name, err)
	}
	return string(b)
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

// Stop sends SIGTERM, waits up to 5 s for the process to exit, then sends
// SIGKILL. It returns at once if the process has already exited. Use Wait
// afterwards for the exit status.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if p.terminate() {
		t.Logf("%s did not exit within %v of SIGTERM; killed it", p.name, stopTimeout)
	}
}

// terminate stops the process and reports whether it needed SIGKILL.
func (p *Process) terminate() (killed bool) {
	if p.Exited() {
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

// WaitHTTP polls url with GET every 20 ms until it answers with a 2xx status.
// The test fails if timeout passes first or if the process exits meanwhile.
func (p *Process) WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	p.WaitHTTPWith(t, client, url, timeout)
}

// WaitHTTPWith is WaitHTTP through c, e.g. a client trusting the
// process's TLS certificate.
func (p *Process) WaitHTTPWith(t testing.TB, c *http.Client, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.Exited() {
			t.Fatalf("%s exited (%v) before %s answered; last error: %v", p.name, p.waitErr, url, last)
		}
		last = get2xx(c, url)
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 2xx within %v: %v", p.name, url, timeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
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
	resp, err := client.Do(req)
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
