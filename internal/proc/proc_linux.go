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
//
// It also puts the child in a process group of its own. The tests pause
// servers with SIGSTOP; a stopped process that shares the group of the
// test binary and the shell that started it gets SIGHUP and SIGCONT from
// the kernel when that group is orphaned (POSIX: when the last process
// linking it to its session's other groups exits, such as the shell a
// background job was started from), which kills a paused server or
// resumes a frozen one early, in the middle of a fault. Alone in its group,
// with the test binary as its parent in the same session, it is not
// orphaned while the test runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
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
