package proc

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr makes the kernel kill a child when the thread that started
// it exits: the test process ending in any way (a timeout panic, a signal)
// leaves no server behind. Start runs it on a locked thread that lives as
// long as the child.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lockThread keeps the calling goroutine on its thread; see sysProcAttr.
func lockThread() { runtime.LockOSThread() }

// RSS returns the resident memory of process pid, in bytes (from
// /proc/<pid>/status).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, ErrNoRSS
}
