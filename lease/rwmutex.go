package lease

import (
	"context"

	"github.com/fencekit/fencekit/lease/internal/record"
)

// RWMutex is a read/write lock of etcd records: any number of readers at
// once, or one writer. Waiters are admitted in the order their records were
// written (FIFO across processes), so a steady stream of readers cannot
// starve a writer: a reader is admitted once no write lock is queued ahead
// of it, a writer once nothing is.
//
// The write lock is a Lease, fenced like any other: its fencing token is
// higher than that of every earlier write lock of the name, and every read
// lock that began before it has ended by the time it is admitted. A write
// lock of an RWMutex and a Lease from Client.Acquire of the same name are
// the same kind of record and exclude each other. Read locks are Permits,
// without a fencing token; see Permit.Revision for refusing reads that a
// newer writer overtook.
//
// An RWMutex is a small value bound to its Client; it is safe for
// concurrent use and costs nothing until it is locked.
type RWMutex struct {
	c    *Client
	name string
}

// RWMutex returns the read/write lock called name. It does no I/O, and
// returns an error matching ErrInvalidName for a bad name.
func (c *Client) RWMutex(name string) (*RWMutex, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return &RWMutex{c: c, name: name}, nil
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// Lock blocks until it holds the write lock, and returns it as a fenced
// Lease. Errors are as for Client.Acquire. Of the AcquireOptions only
// WithLeaseTTL applies, to Lock, TryLock, RLock and TryRLock alike (the
// others are an error matching ErrInvalidOption).
func (rw *RWMutex) Lock(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return rw.acquire(ctx, request{name: rw.name, kind: record.Exclusive, op: "lock"}, opts)
}

// TryLock takes the write lock if nobody holds or waits for the lock, and
// returns an error matching ErrHeld at once otherwise.
func (rw *RWMutex) TryLock(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return rw.acquire(ctx, request{name: rw.name, kind: record.Exclusive, try: true, op: "lock"}, opts)
}

// RLock blocks until it holds a read lock, and returns it as a Permit.
// Errors are as for Client.Acquire.
func (rw *RWMutex) RLock(ctx context.Context, opts ...AcquireOption) (*Permit, error) {
	l, err := rw.acquire(ctx, request{name: rw.name, kind: record.Kind{Shared: true}, op: "read-lock"}, opts)
	if err != nil {
		return nil, err
	}
	return &Permit{l: l}, nil
}

// TryRLock takes a read lock if no write lock is held or waited for, and
// returns an error matching ErrHeld at once otherwise, once the record it
// wrote to find out is deleted (see TryAcquireAll for a delete whose reply
// is lost).
func (rw *RWMutex) TryRLock(ctx context.Context, opts ...AcquireOption) (*Permit, error) {
	l, err := rw.acquire(ctx, request{name: rw.name, kind: record.Kind{Shared: true}, try: true, op: "read-lock"}, opts)
	if err != nil {
		return nil, err
	}
	return &Permit{l: l}, nil
}

// acquire takes the lock req asks for, with the TTL of opts.
func (rw *RWMutex) acquire(ctx context.Context, req request, opts []AcquireOption) (*Lease, error) {
	req, err := withTTLOnly(req, opts)
	if err != nil {
		return nil, err
	}
	return rw.c.acquire(ctx, req)
}
