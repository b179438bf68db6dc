package harness

import (
	"os/exec"
	"syscall"
	"testing"
)

// TestSetProcAttrDeathSignal: a child dies with SIGKILL when the test binary
// does, unless the caller chose its own signal; other attributes stay.
func TestSetProcAttrDeathSignal(t *testing.T) {
	for _, tc := range []struct {
		name string
		attr *syscall.SysProcAttr
		want syscall.Signal
	}{
		{"default", nil, syscall.SIGKILL},
		{"other attributes kept", &syscall.SysProcAttr{Setpgid: true}, syscall.SIGKILL},
		{"the caller's signal", &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("true")
			cmd.SysProcAttr = tc.attr
			setProcAttr(cmd)
			if got := cmd.SysProcAttr.Pdeathsig; got != tc.want {
				t.Errorf("Pdeathsig = %v, want %v", got, tc.want)
			}
			if tc.attr != nil && !cmd.SysProcAttr.Setpgid {
				t.Error("Setpgid was dropped")
			}
		})
	}
}
