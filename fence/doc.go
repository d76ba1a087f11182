// Package fence provides the fencing token that a lease holder hands to the
// resources it writes to, and the rule those resources use to refuse writes
// from holders that have been superseded.
//
// A [Token] names a lock and carries the etcd creation revision of the key
// that made one acquisition of it. etcd revisions only grow, and every new
// acquisition of a lock creates its key anew, so a later holder of the same
// lock always carries a strictly higher revision. A resource that remembers
// the highest token it has accepted for a lock (its mark) and refuses lower
// ones cannot be written by a holder that paused, lost its lease and woke up
// late. [Check] is that rule: equal or newer is admitted, older is
// [ErrStale], a token for another lock is [ErrWrongLock].
//
// What this package does not do: it keeps no marks. Keeping the mark next to
// the data, and checking it atomically with the write, is the job of the
// guard and sqlguard packages. Revisions are comparable only within one etcd
// cluster: restoring a snapshot without `etcdutl snapshot restore
// --bump-revision` can make tokens repeat.
//
// A token is a claim anyone can make up. A resource that receives tokens
// from outside its process should have them verified against the lock
// service before they may raise a mark (lease.Verifier, guard.WithVerifier,
// sqlguard.WithVerifier); a token the service does not confirm is
// [ErrUnverified].
//
// The owner token (package owner) and the fencing token do different jobs:
// the owner token lets a holder manage its own lock record and is never sent
// to other services; the fencing token is public and travels with every
// write (see [NewContext], and the header and metadata helpers in guard).
// A holder of several locks at once (a lease.Set) has one token per lock;
// [NewTokensContext] carries them together, the guard transports send them
// all, and each resource checks the token of its own lock
// ([TokenFromContext], [ValidateTokens]).
//
// # Text form
//
// [Token.String] and [Parse] use the form "<revision>:<name>", for example
// "42:orders". The revision is decimal without sign or leading zeros. The
// name is percent-encoded: bytes other than ASCII letters, digits and
// "-._~/" are written as %XX with upper-case hex. The form is pure ASCII,
// suits HTTP headers and gRPC metadata, and round-trips for any valid lock
// name.
// Parse accepts only the canonical form, so one token has one text.
//
// # Lock names
//
// [ValidateName] is the one rule for lock names in this module: 1 to
// [MaxNameLen] (256) bytes of UTF-8, without "/" and without control
// characters. Package lease refuses other names at Acquire, guard refuses
// a Target bound to one, and a token carrying one is invalid.
//
// # No mark
//
// A resource that has accepted no token has no mark. Where a mark is read
// (guard's Mark and stores), "no mark" is an error matching [ErrNoMark],
// never a zero Token that a caller could mistake for a mark; only [Check]
// and [Max] take the zero Token to mean "nothing accepted yet".
package fence
