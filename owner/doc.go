// Package owner makes per-acquisition owner tokens: the value a lease holder
// writes into its lock record and compares on every release, renew and
// reentry, so that a holder that was superseded cannot manage the lock of
// the holder that replaced it.
//
// A token joins three parts: a stable instance id (which pod or host), the
// process-start epoch (which run of it), and 96 random bits from crypto/rand
// (which acquisition). An IP address, a thread id or a fixed instance id alone
// would repeat across NAT, restarts or two acquisitions of one instance; the
// random part never does, and the first two parts make a token traceable in
// the lock record.
//
// A token is a secret of its holder: it is never handed to other services
// (they receive the fencing token from package fence instead) and never
// logged. [Token.String], %v, %#v and slog all print only [Token.Digest], a
// short hash that joins log lines without revealing the token. Only
// [Token.Value] returns the token itself, for writing the lock record.
//
// Most programs never import this package: package lease makes a token
// per acquisition from [Default] (or from lease.WithInstanceID's id) and
// shows only its digest (lease.Lease.OwnerDigest). Import it to choose the
// instance id ([DefaultInstance] says where the default comes from), or
// to read the owner of a lock record written by lease ([Parse]).
package owner
