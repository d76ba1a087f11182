//go:build !linux

package kubetest

import (
	"errors"
	"syscall"
)

// sysProcAttr is the default here: only Linux kills children when their
// parent dies; processes are stopped by Close or the test's cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func lockThread() {}

// RSS is not known here: it always fails.
func RSS(int) (int64, error) { return 0, errors.New("kubetest: RSS is read on Linux only") }
