//go:build !linux

package redistest

import (
	"os/exec"
	"syscall"
)

const (
	syscallSIGSTOP = syscall.SIGSTOP
	syscallSIGCONT = syscall.SIGCONT
)

func setDeathSignal(cmd *exec.Cmd) {}
