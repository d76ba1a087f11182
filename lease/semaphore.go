package lease

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/lease/internal/record"
)

// MaxPermits is the largest size of a Semaphore.
const MaxPermits = 1 << 16

// Semaphore is a counting semaphore of etcd records: at most Size permits
// of it are held at once, across every Client that uses its name, and
// waiters are admitted in the order their records were written (FIFO
// across processes): a waiter is admitted once fewer than Size records are
// ahead of it.
//
// Every participant must use the same size. A record states its size, and
// an acquisition that finds a permit of another size, or another kind of
// lock (a Lease, an RWMutex, an Election) of the same name queued ahead of
// it fails with ErrMismatch, leaving nothing behind. Permits have no
// fencing token: see Permit.
//
// A Semaphore is a small value bound to its Client; it is safe for
// concurrent use and costs nothing until Acquire.
type Semaphore struct {
	c    *Client
	name string
	n    int
}

// Semaphore returns the semaphore of n permits called name. It does no I/O.
// It returns an error matching ErrInvalidName for a bad name, and an error
// for n outside 1..MaxPermits.
func (c *Client) Semaphore(name string, n int) (*Semaphore, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxPermits {
		return nil, fmt.Errorf("lease: semaphore %q: size %d outside 1..%d", name, n, MaxPermits)
	}
	return &Semaphore{c: c, name: name, n: n}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Size returns how many permits the semaphore has.
func (s *Semaphore) Size() int { return s.n }

// Acquire blocks until it holds a permit and returns it. ctx bounds only
// the wait. Errors are as for Client.Acquire, plus ErrMismatch. Of the
// AcquireOptions only WithLeaseTTL applies (the others are an error
// matching ErrInvalidOption).
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Permit, error) {
	req, err := withTTLOnly(request{name: s.name, kind: record.Kind{Limit: s.n}, op: "acquire permit"}, opts)
	if err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &Permit{l: l}, nil
}

// TryAcquire takes a permit if one is free and nobody waits ahead, and
// returns an error matching ErrHeld at once otherwise, once the record it
// wrote to find out is deleted (see Client.TryAcquireAll for a delete whose
// reply is lost). ctx bounds the requests. Options are as for Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Permit, error) {
	req, err := withTTLOnly(request{name: s.name, kind: record.Kind{Limit: s.n}, try: true, op: "acquire permit"}, opts)
	if err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &Permit{l: l}, nil
}
