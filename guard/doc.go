// Package guard makes resources refuse writes from lease holders that have
// been superseded: it keeps, per protected resource, the highest fencing
// token accepted (the mark) and rejects anything older, in HTTP handlers
// or plain Go code; and it carries tokens from HTTP clients to those
// servers.
//
// Package guard depends on the standard library, fence, Prometheus's
// client and OpenTelemetry's trace API only (the API, not an SDK: spans
// are recorded only through the TracerProvider of [WithTracerProvider]).
// The gRPC interceptors are in package grpcguard and the etcd-backed
// store in package etcdstore (both under guard/), so that a program that
// uses neither links neither gRPC nor the etcd client.
//
// # The rule
//
// A token (fence.Token) names a lock and the etcd revision of one
// acquisition of it. A resource bound to lock L accepts a token for L equal
// to its mark (the same holder writing again) or newer (and raises its mark
// to it), and refuses an older one (stale). It refuses a token for another
// lock even when its revision is higher: etcd revisions are cluster-wide
// and order acquisitions of one lock only. Tokens with a revision <= 0 are
// invalid. [fence.Check] is the rule; [Guard] applies it.
//
// # Propagation
//
// A token travels as one HTTP request header, [Header] ("Fencing-Token"),
// or one gRPC metadata key (grpcguard.MetadataKey, "fencing-token"), whose
// value is the token's text form, for example "42:orders". Clients put the
// token in the request context with fence.NewContext and send requests
// through [Transport] or grpcguard's client interceptors, which stamp it.
// Servers read it with [Guard.Middleware] or grpcguard's server
// interceptors, which check it and put it in the handler's context
// (fence.FromContext). Other transports use [TokenFromValues] and
// [Guard.Serve].
//
// A request that writes under several locks at once (a lease.Set) carries
// one token per lock: fence.NewTokensContext puts them in the context,
// [Transport] sends them as one comma-separated Header line ("42:a,42:b";
// a request with one token is exactly as before), and grpcguard one
// metadata value each. The server reads them with [TokensFromValues] and
// checks the token of the lock the Target is bound to ([TokenForLock]):
// none for that lock is fence.WrongLock; an empty element, an unparsable
// token, two tokens of one lock (whatever their revisions) or more than
// fence.MaxTokens is fence.Malformed.
//
// # Answers
//
// Every decision has a fence.Outcome, and every refusal is a
// *fence.RefusedError naming the resource, the token received and the
// mark, whose Outcome picks the answer from one table per transport.
// HTTP ([HTTPStatus], [ProblemType]): a missing token is 428, a malformed
// one 400, a stale, wrong-lock or mark-ahead one (see below) 409
// Conflict, an unverified one (see below) 403 Forbidden, a failure to
// decide (the store or verifier failed or ran out of its budget, or the
// request ended while waiting) 503, each with an RFC 9457
// application/problem+json body ([Problem]) carrying the outcome's word.
// gRPC (package grpcguard): stale or wrong lock is codes.Aborted, a mark
// ahead codes.FailedPrecondition, unverified codes.PermissionDenied,
// missing or malformed codes.InvalidArgument, with a
// google.rpc.ErrorInfo detail; a store or verifier failure
// codes.Unavailable, and a call whose own context ended codes.Canceled or
// codes.DeadlineExceeded. In Go, [Guard.Do] refuses with a
// *fence.RefusedError matching fence.ErrStale (and fence.ErrMarkAhead
// when the mark is ahead), fence.ErrWrongLock, fence.ErrUnverified or
// fence.ErrInvalid (malformed), and fails with [ErrUnavailable] or the
// ctx's error; [TokenFromHeader] returns a refusal matching
// fence.ErrMissing or fence.ErrInvalid.
//
// # Verification
//
// A fencing token is a claim anyone can make: without verification, any
// client able to send a header (or metadata) can raise a mark, and one
// made-up token such as "1099511627776:orders" locks every real holder
// out of the resource for good (etcd's revision will never reach it).
// Tokens from another etcd cluster, or from one restored without
// --bump-revision, do the same by accident. Verify tokens wherever they
// arrive from outside the process:
//
//	verifier, err := lease.NewVerifier(cli, lease.DefaultPrefix)
//	...
//	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(verifier))
//
// (locks.Verifier() gives the same verifier for a lease.Client's prefix.)
//
// A Guard with a [Verifier] promises that only the token of the lock's
// current holder, at the time of the check, can raise a mark: before a
// token newer than the mark moves it, the Guard asks the verifier (for
// lease.Verifier, one etcd range read: is the head of the lock's queue
// the record created at exactly this revision?). A token the verifier
// does not confirm is refused (outcome unverified) and the mark does not
// move; when the verifier cannot answer (etcd unreachable, the request's
// context ended) the outcome is failed and nothing is admitted. Each
// Store and Verifier call has its own budget ([WithCheckTimeout], default
// 5 s, and at most nine tenths of the time left before the request's
// deadline), so a request without a deadline still gets its refusal:
// [ErrUnavailable], HTTP 503, gRPC Unavailable. Only a request whose own
// context ended gets that context's error (gRPC Canceled or
// DeadlineExceeded). While a token newer than the mark is being verified
// the resource is not held: requests that need no verification (the
// holder's token, equal to the mark) go on, and the newer token is then
// advanced by the store's compare-and-advance, which refuses it if the
// mark passed it meanwhile. (With a [VerifyingStore] every decision reads
// etcd, so there is nothing to go on with; its one call runs with the
// resource held, within the budget.) A token equal to the mark (the holder writing
// again), a stale one and one for another lock are decided from the mark
// alone: the verifier is asked once per acquisition and resource; only a
// stale refusal asks it again, to tell a superseded holder from a mark
// ahead of the lock service (below).
//
// With etcdstore in the same etcd cluster as the locks and a
// lease.Verifier, the check and the mark's advance are one etcd Txn (the
// store implements [VerifyingStore]): the mark rises only if the token's
// holder still holds the lock at that moment. Otherwise (MemoryStore,
// marks in another cluster, a verifier without Condition) they are two
// steps: between them the holder may lose its lease and a successor
// acquire the lock, and the mark can then rise to the token that was
// current at the check. That token was issued by the lock service, the
// successor's token is newer and still admitted, and the superseded
// holder is refused as stale once its successor has written (or
// [Guard.Claim]ed): the same guarantee as for any holder that loses its
// lease right after a write was admitted. In no case can a forged token,
// a waiter's, another cluster's, or one whose lease had ended before the
// check raise a mark. Either way the write a token admits runs after the check, so a
// holder may lose its lease while its write runs: the fencing rule, not
// the verifier, stops its later writes.
//
// # Recovering a poisoned mark
//
// A mark can be ahead of every token the lock service issues: raised by a
// forged token before a verifier was configured, or kept from another
// etcd cluster. A new cluster starts revisions again (its first lock gets
// revision 2), and so does one restored from a snapshot without
// --bump-revision, so marks kept outside it (a MemoryStore in a process
// that outlives it, an etcdstore.Store in another cluster, sqlguard's
// tables) refuse every new holder as stale. With a verifier the Guard
// tells this from a superseded holder: a stale token the verifier confirms
// as the current holder's is refused with outcome mark_ahead
// (fence.ErrMarkAhead; HTTP 409, gRPC FailedPrecondition),
// logged at Error. Without one it cannot tell, and the stale error says
// what to do if the holder is current. Either way the mark is
// set back with [Guard.ResetMark], an operator's action that names the
// exact old mark, so it cannot undo an advance it did not see, and logs
// both marks at Warn. [MemoryStore] and etcdstore.Store implement it
// ([Resetter]); sqlguard has its own ResetMark.
//
// # Guarantees
//
// A [Guard] runs the check of a token against the mark (the store's
// compare-and-advance) and the write it admits as one step per resource:
// no other write of that resource through the same Guard starts until the
// write returns. With any [Store], the writes one Guard
// admits for a resource therefore run one at a time, in non-decreasing
// token order, and after a write (or [Guard.Claim]) with token t returns,
// no write with a token older than t is admitted by any Guard sharing the
// store.
//
// [MemoryStore] keeps marks in one process; they are lost on restart.
// etcdstore.Store keeps them in etcd, shared by every replica that uses the
// same prefix, and advances them with a compare-and-swap Txn, so the mark
// itself never goes backwards.
//
// # The window between replicas
//
// The check is not atomic with a write that lands somewhere else. With
// replicas sharing an etcdstore.Store, replica R1 may advance the mark to 5 and
// start its write while replica R2 advances it to 7 and finishes its own
// write; R1's write with token 5 then lands after token 7's. The window of
// a write is from the commit of its mark check in etcd to the end of its
// write callback (or handler); a stale write can land after a newer one
// only if it was admitted before the newer token advanced the mark and was
// still running. Claim does not close it across replicas either: it waits
// for the in-flight writes of its own Guard only. The window closes when
// the check is atomic with the write:
//
//   - one Guard per resource: route every write of a resource to one
//     replica (or one process); then MemoryStore or etcdstore is exact;
//   - the mark next to the data, checked in the same transaction: package
//     sqlguard keeps the mark in a row of the same database and checks and
//     advances it in the same SQL transaction as the write, so the
//     database's row lock orders them;
//   - data in the same etcd cluster: make the data's Txn also compare the
//     mark key (see etcdstore.Store.Key) with the token.
//
// # What guard does not do
//
//   - It does not stop writes that bypass it: a resource is fenced only
//     where every writer goes through a Guard (or sqlguard).
//   - Without WithVerifier it does not check that a token was ever
//     issued: any sender can raise a mark (see Verification). It never
//     authenticates the sender: a client that learns the current holder's
//     token can write as the holder.
//   - It orders writes per resource only; a request touching several
//     resources is not atomic across them.
//   - It does not detect the same request applied twice (use an
//     idempotency key) nor whether the writer saw the latest state (use
//     an ETag or version compare); a new holder that reads before it
//     writes should call Claim first, so an old holder cannot write between
//     its read and its write.
//   - Work a handler leaves running after it returns is not fenced.
//   - Marks are only as durable as their store; restoring etcd from a
//     snapshot without --bump-revision can re-issue old revisions.
//   - A write refused at the resource does not stop the stale holder's
//     other side effects; it must watch its lease (lease.Lease.Done).
//
// # Observability
//
// Every decision has an outcome (accepted, stale, wrong_lock, missing,
// malformed, unverified, failed), counted in
// fencekit_guard_decisions_total{outcome} on a caller's Prometheus
// registry ([WithMetrics]; a resource label only with
// [WithResourceLabel]) and logged through [WithLogger] (discarded by
// default). These are the two channels of lease and sqlguard too; there
// is no per-decision callback: a program that must act on refusals acts
// on the errors and statuses the Guard returns, and one that wants every
// decision reads the log records (a slog.Handler of its own receives
// them as structured attributes). Log records use package lease's field
// names: "lock" (a hash of the lock name, [LockHash]), "fence" (the
// received token's revision), plus "mark", "resource" and "outcome"; so a
// stale rejection joins to the lease records of the acquisition whose
// token it refused. Owner tokens never reach this package.
//
// [WithTracerProvider] adds OpenTelemetry spans on a caller's
// TracerProvider (never the global one; without the option no span is
// started and nothing is added to the caller's span): one span per
// decision, "fencekit.guard.do", "fencekit.guard.serve" (the HTTP
// middleware and package grpcguard's interceptors) or
// "fencekit.guard.claim", a child of the span in the request's context.
// They are spans, not events on the caller's span, so that they exist
// when the caller has no span and time the wait for the resource and the
// Store and Verifier calls; each ends before the write it admits runs.
// Their attributes are the log's fields under the keys of package lease's
// spans ("fencekit.outcome", "fencekit.resource", "fencekit.lock" as a
// hash, "fencekit.fence" and "fencekit.mark" as integers); a refusal has
// status Error.
package guard
