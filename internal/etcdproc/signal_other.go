//go:build !unix

package etcdproc

import "os"

// Without SIGSTOP, Pause and Resume cannot work here; they fail with the
// error os.Process.Signal gives for os.Interrupt's absence.
var sigStop, sigCont, sigTerm os.Signal = os.Interrupt, os.Interrupt, os.Kill
