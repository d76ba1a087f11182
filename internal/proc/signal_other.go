//go:build !unix

package proc

import "os"

// Without SIGSTOP, Pause cannot work here; it fails with the error
// os.Process.Signal gives for os.Interrupt's absence.
var sigStop, sigCont, sigTerm os.Signal = os.Interrupt, os.Interrupt, os.Kill
