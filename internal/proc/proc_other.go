//go:build !linux

package proc

import (
	"errors"
	"syscall"
)

// sysProcAttr is the default here: only Linux kills children when their
// parent dies; processes are stopped by their owners' Close or cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func lockThread() {}

// RSS is not known here: it always fails.
func RSS(int) (int64, error) { return 0, errors.New("proc: RSS is read on Linux only") }
