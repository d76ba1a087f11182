package shard

import "errors"

var (
	// ErrInvalidConfig reports a bad argument to NewGroup or Join (a name,
	// a weight, a shard list or an option): nothing was created or
	// written.
	ErrInvalidConfig = errors.New("shard: invalid configuration")
	// ErrMemberExists reports that Join found the member name registered
	// by another live member of the group; nothing was written.
	ErrMemberExists = errors.New("shard: member name taken")
	// ErrMoved is the cause with which a shard's context is cancelled when
	// the assignment moved the shard to another member: the shard is
	// released right after, for the successor, which waits for it in the
	// lock's queue.
	ErrMoved = errors.New("shard: moved to another member")
	// ErrLeft is the cause with which a shard's context is cancelled by
	// Close, and Member calls fail after Leave or Close.
	ErrLeft = errors.New("shard: member left the group")
	// ErrMismatch reports that the group's assignment in etcd was written
	// for another set of shards than this Group's: every member must give
	// the same shards (see Count and Named).
	ErrMismatch = errors.New("shard: assignment written for other shards")
	// ErrNoAssignment reports that Inspect found no assignment for the
	// group: no member has led it yet (or the prefix is another).
	ErrNoAssignment = errors.New("shard: no assignment")
)
