package harness

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the child if the test binary dies, so an
// interrupted or crashed test never leaves Envoy or allotd running.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// processAlive reports whether a process with the given pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
