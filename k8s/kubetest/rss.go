package kubetest

import "github.com/fencekit/fencekit/internal/proc"

// RSS returns the resident memory of process pid, in bytes (from
// /proc/<pid>/status; it fails on systems other than Linux): for
// reporting what a Server costs.
func RSS(pid int) (int64, error) { return proc.RSS(pid) }
