package faults

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrLate is what SlowWriter.Write returns for a write it delayed: to the
// caller the write looks like one that timed out, although it is still on
// its way and will take effect later.
var ErrLate = errors.New("faults: write delayed; it will land late")

// SlowWriter is a fault placed in your own write path. While it is
// injected, every write passed to Write is delivered late: Write returns
// ErrLate at once, as a client whose request timed out would see it, and
// the write runs in the background after the delay. The caller goes on —
// typically it gives up the lease — while its write is still on the wire,
// and the write lands after the next holder's: "the message sent by A
// might arrive after process B's message". No process is paused; the
// write is just late.
//
// A SlowWriter is safe for concurrent use; one may serve many writers.
// Call Wait before checking the resource, so that every late write has
// landed.
type SlowWriter struct {
	delay time.Duration
	on    atomic.Bool
	wg    sync.WaitGroup
}

// NewSlowWriter returns a SlowWriter, not injected, whose late writes run
// delay after Write was called.
func NewSlowWriter(delay time.Duration) *SlowWriter {
	return &SlowWriter{delay: delay}
}

// Kind returns "slow-writer".
func (s *SlowWriter) Kind() string { return KindSlowWriter }

// Inject makes every later Write late, until Heal.
func (s *SlowWriter) Inject(context.Context) error {
	s.on.Store(true)
	return nil
}

// Heal makes Write run writes at once again. Writes already delayed still
// land late.
func (s *SlowWriter) Heal(context.Context) error {
	s.on.Store(false)
	return nil
}

// Write runs write and returns its error when the fault is not injected.
// Otherwise it returns ErrLate at once and runs write in a goroutine of its
// own after the delay, discarding its error: nobody is waiting for the
// answer any more. write must then not depend on the caller's context,
// which may have ended by the time it runs.
func (s *SlowWriter) Write(write func() error) error {
	if !s.on.Load() {
		return write()
	}
	s.wg.Go(func() {
		time.Sleep(s.delay)
		_ = write()
	})
	return ErrLate
}

// Wait waits until every late write has run.
func (s *SlowWriter) Wait() { s.wg.Wait() }
