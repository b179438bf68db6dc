package scenario

import (
	"context"
	"os"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// client sends the pre-flight requests and allotd's admin calls
// (harness.Client: never through a proxy from the environment).
var client = harness.Client

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

// envoy is a running Envoy (harness.LaunchEnvoy) with its listener's
// address.
type envoy struct {
	*harness.Envoy
	listener string
	ready    time.Duration // from start to /ready LIVE
}

// startEnvoy runs Envoy with bootstrap on CPU cpu (unpinned when
// negative), env added to its environment and extra arguments, and waits
// for /ready and the listener's bound port; its log and admin address go to
// dir.
func startEnvoy(ctx context.Context, bin, dir, name, bootstrapPath string, concurrency, cpu int, env []string, extra ...string) (*envoy, error) {
	start := time.Now()
	h, err := harness.LaunchEnvoy(ctx, harness.EnvoyOptions{Bootstrap: bootstrapPath, Concurrency: concurrency, ExtraArgs: extra,
		Bin: bin, Name: name, Dir: dir, Pinned: cpu >= 0, CPU: cpu, Env: env, Timeout: 60 * time.Second})
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
	v, _, _ := e.Stat(name)
	return v
}
