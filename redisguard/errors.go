package redisguard

import (
	"errors"
	"fmt"
)

var (
	// ErrBadCommand reports a command that a fenced write does not run: a
	// name outside the allow-list (see Command), a wrong number of
	// arguments, an argument that is not what the command takes, a
	// command on the resource's mark key, or a batch of no commands. It
	// is returned before anything is sent to Redis.
	ErrBadCommand = errors.New("redisguard: command not allowed")
	// ErrCrossSlot reports a key whose Redis Cluster hash slot is not the
	// slot of its resource's mark, so that the mark and the key could
	// not be changed by one script on a cluster. Build keys with Key. It
	// is returned before anything is sent to Redis, on a cluster or not.
	ErrCrossSlot = errors.New("redisguard: key outside the resource's hash slot")
	// ErrUnclaimed reports a resource that has no mark from the Redis
	// server's current life (see the package documentation, Durability):
	// never claimed, or claimed before the server restarted or failed
	// over. Writes are refused until the lock's current holder claims it
	// (Guard.Claim, Store.Claim, or any write through a Guard with a
	// verifier, which verifies the token first). Errors matching it also
	// match fence.ErrNoMark.
	ErrUnclaimed = errors.New("redisguard: resource not claimed on this Redis server")
	// ErrCommand reports a command that Redis refused while the fenced
	// script ran it (for example WRONGTYPE: a hash command on a string).
	// Errors matching it are *CommandError. Nothing was changed: the
	// script undoes the batch's earlier commands and leaves the mark as
	// it was.
	ErrCommand = errors.New("redisguard: command failed")
)

// CommandError is the error for a command of a fenced write that Redis
// refused while running it. It matches ErrCommand. The batch had no
// effect: neither its commands nor the mark's advance were kept.
type CommandError struct {
	// Resource is the resource the write was for.
	Resource string
	// Index is the position of the failed command in the batch, from 0.
	Index int
	// Name is the command's name, upper-case.
	Name string
	// Msg is Redis's error text, for example "WRONGTYPE Operation
	// against a key holding the wrong kind of value".
	Msg string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("redisguard: resource %q: command %d (%s) failed, nothing applied: %s", e.Resource, e.Index, e.Name, e.Msg)
}

// Is reports whether target is ErrCommand.
func (e *CommandError) Is(target error) bool { return target == ErrCommand }
