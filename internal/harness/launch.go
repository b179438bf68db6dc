package harness

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

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

// GoBuild runs `go build flags... -o out pkg` in the module directory dir
// with env ("KEY=value") added to the environment. It writes where it is
// told and caches nothing; Build is the cached form tests use.
func GoBuild(ctx context.Context, dir, out, pkg string, flags []string, env ...string) error {
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
