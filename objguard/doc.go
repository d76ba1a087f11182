// Package objguard makes an S3-compatible object store refuse writes from
// a superseded lock holder: a fenced PUT or DELETE of an object is sent
// only when the caller's fencing token is equal to or newer than the
// token of the object's last fenced writer, as a conditional request
// (If-Match, If-None-Match: *) on the version it decided about, so that
// nothing can be written in between.
//
// It is a Go module of its own (github.com/fencekit/fencekit/objguard) so
// that only programs that use it link the AWS SDK
// (github.com/aws/aws-sdk-go-v2/service/s3, v1.69.0 or later, the first
// with If-Match on PutObject). It takes any Client (an *s3.Client
// satisfies it) and is tested against versitygw 1.8.0.
//
// # Fenced writes
//
// Each object carries its mark, the token of its last fenced writer, in
// its metadata ([MetaToken], x-amz-meta-fencekit-token, the token's text
// form). [Guard.Put] reads the object's ETag and mark (HEAD), decides with
// package fence's rule (a token of the mark's lock equal to the mark or
// newer passes), and sends the PUT with If-Match: <that ETag>, or
// If-None-Match: * when there was no object, carrying its own token as the
// new mark:
//
//	_, err = g.Put(ctx, "daily.json", b, []byte(`{"by":"B"}`))
//	...
//	_, err = g.Put(ctx, "daily.json", a, []byte(`{"by":"A, late"}`))
//	var stale *fence.RefusedError
//	if errors.As(err, &stale) {
//
// When another write lands between the read and the PUT, the store
// refuses the PUT (412) and Put reads and decides again (at most
// [MaxAttempts] times, then [ErrContended]). Refusals are the module's one
// refusal, a *fence.RefusedError naming the key, the token and the mark,
// with Outcome fence.Missing (a zero token), fence.Malformed (an invalid
// one), fence.Stale (older than the mark), fence.WrongLock (the mark is
// another lock's) or fence.Unverified ([WithVerifier]). An object written
// outside the Guard has no mark, and any valid token may write it; one
// whose mark does not parse is neither overwritten nor deleted
// ([ErrBadMark]).
//
// # Requests per write, and the remembered version
//
// A Guard remembers, per object, the ETag and mark of the version it last
// wrote, and writes on it without reading first: a holder's repeated
// writes to an object cost one request each (the conditional PUT), the
// same as a plain PUT; a first write (or one after a restart) costs a HEAD
// and the PUT; with a verifier, each acquisition costs one etcd read per
// Guard; each 412 costs a HEAD and a PUT more. That is safe because the
// remembered version is only a guess that the store checks: the PUT
// carries If-Match: <the remembered ETag>, so it lands only if the object
// is still the version the Guard wrote, whose mark is the one the Guard
// remembers, and the decision is the one a fresh read would have given.
// When anything else was written meanwhile, the store refuses (412) and
// the Guard forgets the version and reads. It also forgets it after any
// failure (a lost reply leaves the outcome unknown), and it never refuses
// on a remembered version: a token the remembered mark would refuse is
// decided on a fresh read. [WithCacheSize] bounds (or turns off) the
// memory. BenchmarkS3 compares fenced and plain PUTs and DELETEs; the
// figures are in
// https://github.com/fencekit/fencekit/blob/main/docs/object-storage.md.
//
// # ETags name bytes, not versions
//
// S3 (but for SSE-KMS and SSE-C objects) and versitygw compute a
// single-part object's ETag from its bytes (an MD5 digest), not from its
// metadata: two versions with the same
// bytes have the same ETag, whatever their marks. If-Match therefore
// checks "the object still has the bytes I decided about", and that means
// "still the version I decided about" only as long as no version repeats
// the bytes of an earlier one. Suppose holder A (token 41) decided on
// version X (or remembers it, having written it), is paused, and B
// (token 42) writes Y and then X again: A's If-Match names X's ETag,
// which is current again, and A's late write lands. Fencing is exact when
// the bytes of every fenced write are new for its object: put the token,
// a generation or a write id in them, as manifests and pointers do (see
// the commit Example). Tombstones carry a random nonce for that reason,
// and so do the probe's writes. A program that must write equal bytes
// under successive tokens (a status object flipping between two values)
// needs that id added. The remembered version widens the window of this
// case from one read-to-write gap to the whole time since the holder's
// last write to the object (TestETagNamesBytes shows a late write landing
// after X, Y, X); WithCacheSize(0) narrows it back, at the price of a
// read per write.
//
// # Deletes keep the mark
//
// A plain DELETE would remove the mark with the object, and a superseded
// holder's If-None-Match: * would then create it again. [Guard.Delete]
// therefore writes a tombstone instead: a small object (Content-Type
// [TombstoneContentType], metadata [MetaDeleted] "1") that carries the
// deleter's token as the mark, written under the same conditions as a
// PUT. A stale holder's Put over it is refused like any other. [Guard.Get]
// reports a tombstone as [ErrNotFound]; plain readers see a small object
// whose metadata says what it is (list with care, or exclude tombstones by
// a lifecycle rule on that metadata where the store supports one).
// [Guard.Purge] removes an object and its mark with a DELETE conditional
// on its ETag (If-Match): afterwards anyone can create the key again, so
// keep it for keys no lock protects any longer.
//
// # Multi-object commits
//
// The usual way to change many objects at once is to write the data
// objects under new, unique names and then switch one pointer or manifest
// object that names them; readers follow the manifest. Only the manifest
// needs fencing: a superseded writer may still write data objects, but
// under names it made up and no manifest names, so no reader sees them
// (they are garbage to collect). Fencing each data object too would cost a
// HEAD and a conditional PUT per object and protect nothing readers see;
// create them with If-None-Match: * instead, so that a name is never
// written twice.
//
// # The conformance probe
//
// A store that ignores the conditions accepts every fenced write, a
// superseded holder's too. [New] runs [Probe] first, on a scratch key: a
// PUT with If-None-Match: * on an existing key, a PUT with a wrong
// If-Match and a DELETE with a wrong If-Match must each be refused (and
// change nothing), and a PUT and a DELETE with the right If-Match must
// succeed. A store that ignores any is refused with a *[ProbeError]
// ([ErrConditionsIgnored]) naming what it ignored. [WithoutProbe] skips the
// probe; it is unsafe unless the same store and path (proxies and gateways
// can strip headers) passed it before. The probe checks one key once: it
// is a conformance check, not a proof.
//
// # Verified tokens
//
// With [WithVerifier] (a lease.Verifier), a token that would raise an
// object's mark (newer than it, or the first on an object without one) is
// first confirmed as its lock's current holder's; one the verifier does not
// confirm is refused (fence.Unverified), and when the verifier cannot tell
// the write fails and nothing is sent (fail closed). The Guard remembers
// per lock the last token it verified, as redisguard and sqlguard do. The
// verification (an etcd read) and the conditional PUT are two steps:
// between them the holder may lose its lease, and the mark can then rise to
// the token that was current at the check; the successor's token is newer,
// and once the successor writes, the superseded holder is refused.
//
// # Trust model, and what it does not do
//
//   - Only writes through a Guard are fenced. A plain PUT or DELETE by
//     anyone with write access to the bucket bypasses the mark (and a plain
//     PUT without the metadata erases it). Bucket policy can narrow that:
//     grant s3:PutObject and s3:DeleteObject on the fenced prefix only to
//     the principals of the fenced writers, and, on AWS, require the
//     conditional headers for them (the s3:if-match and s3:if-none-match
//     condition keys).
//   - The mark is metadata the writers themselves set: a writer that lies
//     about its token (a forged one) is stopped only by WithVerifier.
//   - Multipart uploads, CopyObject and versioned buckets' older versions
//     are not fenced. A CopyObject of an object onto itself that replaces
//     its metadata changes the mark without changing the ETag: never do
//     that to a fenced object.
//   - A write whose reply was lost has an unknown outcome; Put's error
//     says so (a store error) and the Guard forgets the version.
//
// # Observability
//
// [WithMetrics] counts every Put, Delete and Purge in
// fencekit_objguard_decisions_total{op,outcome} with fence.Outcome's words
// (accepted, stale, wrong_lock, malformed, missing, unverified, failed)
// and "invalid", and the conditional writes the store refused because the
// object had changed in fencekit_objguard_conflicts_total{op};
// [WithLogger] logs with lease's field names ("lock" is a hash of the
// lock name, never the name); [WithTracerProvider] adds
// "fencekit.objguard.<op>" spans.
package objguard
