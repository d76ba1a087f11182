// Package check checks the history of a fenced resource: what it applied,
// in order, under which fencing tokens, and which writes were acknowledged
// to their writers. It implements the rules fencekit's own safety suite
// checks (package integration), so that tests of your own critical
// sections can check the same:
//
//   - TokenBackwards: no applied write carries a token lower than one
//     applied before it.
//   - TokenInterleaved: the writes under one token are contiguous; once
//     another token wrote, an older holder never writes again.
//   - AckedLost: every write acknowledged to its writer is in the final
//     state (Jepsen's set-full check).
//
// Record with a History (Apply where the resource applies a write, Ack
// where a writer gets its acknowledgement, or AckWriter for a worker
// process that prints AckLine), or build the slices yourself, and call
// Check. The Report counts each rule's problems and lists the first ones;
// Report.Err names the first.
//
// CheckLinearizable is a second, independent check, built on porcupine
// (github.com/anishathalye/porcupine): record each client's operations on
// a fenced register — claims, fenced or plain reads, writes — with their
// call and return times and outcomes (Op), and it searches for an order
// that is a legal run of FencedRegister: an operation is admitted iff its
// token is at least the mark, which it raises; an admitted write sets the
// value. Where Check trusts the resource's own log of applied writes, it
// trusts only what the clients saw, so the two catch different mistakes
// (a log written outside the serialized path, a read served from a stale
// copy). On a history that is not linearizable, Linearization.Visualize
// writes porcupine's HTML view of it.
//
// What it does not do: it checks one resource at a time and only the
// rules above. It does not know which writes were rejected, nor whether an
// element was applied twice (that is an idempotency key's job, not a
// fencing token's). A history is only as good as its recording: call Apply
// inside the resource's serialized write path, in the order writes take
// effect.
package check
