package redistest

import (
	"os/exec"
	"syscall"
)

const (
	syscallSIGSTOP = syscall.SIGSTOP
	syscallSIGCONT = syscall.SIGCONT
)

// setDeathSignal makes the kernel kill the server if the test binary dies
// without running its cleanups, so no redis-server outlives a crashed test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
