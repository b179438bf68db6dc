package scenario

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/allotmesh/allot/internal/harness"
)

// TestSettle: a window starts at once over idle processes, and over busy
// ones only when settleWait ran out, which it counts.
func TestSettle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU time is read from /proc")
	}
	launch := func(name string, args ...string) *harness.Process {
		t.Helper()
		p, err := harness.Launch(name, filepath.Join(t.TempDir(), name+".log"), exec.Command(args[0], args[1:]...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Terminate() })
		return p
	}
	idle := launch("idle", "sleep", "60")
	c := newCPUCounter(map[string][]*harness.Process{"idle": {idle}})
	if err := c.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.busy != 0 {
		t.Fatalf("an idle process: %d windows counted as started busy, want 0", c.busy)
	}
	// Four spinning processes: on a loaded machine (the tests of other
	// packages run beside this one) one alone can get under a tenth of a
	// CPU in some 25 ms window and pass for idle.
	for i := range 4 {
		c.groups["busy"] = append(c.groups["busy"], launch(fmt.Sprintf("busy-%d", i), "sh", "-c", "while :; do :; done"))
	}
	if err := c.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.busy != 1 {
		t.Fatalf("a process spinning: %d windows counted as started busy, want 1", c.busy)
	}
	if c.starts != 2 {
		t.Fatalf("%d windows counted as started, want 2", c.starts)
	}
}
