package harness

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the child if the test binary dies, so an
// interrupted or crashed test never leaves Envoy or allotd running: SIGKILL,
// unless the caller chose another signal (SIGTERM for a script that stops
// its own children on it).
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}

// processAlive reports whether a process with the given pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
