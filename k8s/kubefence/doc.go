// Package kubefence makes the Kubernetes API server itself refuse the
// writes of a deposed leader: a ValidatingAdmissionPolicy (CEL evaluated
// inside kube-apiserver, no webhook to run; Kubernetes 1.30 or later)
// compares the fencing token a write carries in the annotation
// "fencekit.io/fencing-token" (Annotation, fence's text form
// "<revision>:<lock>") with the token the object already carries, and
// refuses, for the resources a Policy names and their status:
//
//   - stale: a token older than the object's (the writer was superseded);
//   - wrong_lock: a token of another lock than the Policy's;
//   - missing: no token, on an object that carries one (or on any matched
//     object, with Policy.RequireToken);
//   - malformed: an annotation that is not a token.
//
// The words are fence.Outcome's. The API server answers 422 Invalid with
// the message "... denied request: fencekit: stale: token=5:orders
// mark=9:orders lock=orders"; Refusal turns that into a
// *fence.RefusedError, so errors.Is(err, fence.ErrStale) holds as for
// every other guard of this module. Identities named in
// Policy.BreakGlassUsers and BreakGlassGroups are not fenced (the policy's
// matchConditions on request.userInfo).
//
// Install (Policy.Objects, PolicyYAML and BindingYAML for kubectl users)
// puts the policy and its binding in a cluster; the API server enforces a
// new binding about a second later. Writers stamp their token with Stamp
// or StampContext (before Create and Update) and StampPatch (merge,
// strategic-merge, JSON and apply patches); ctrlfence.NewClient does all
// of it for a controller-runtime client, from fence.FromContext(ctx), the
// leader's ctx of fencelock and ctrlfence.
//
// # Status writes and DELETE
//
// The policy sees objects, not requests. A DELETE has no object to carry
// a token, and a status write of a custom resource or a Pod has its
// metadata reset to the stored object's before admission (a Deployment's
// keeps the annotation it sends, and the policy, which matches
// <resource>/status too, checks it as for the resource). Both are fenced
// in two steps: StampObject writes the token into the object with a merge
// patch, which the policy refuses when the token is stale, and the write
// follows preconditioned on the resourceVersion that patch returned
// (UpdateStatus with it in the object, Delete with
// metav1.Preconditions), so that a successor's stamp in between turns it
// into a Conflict. ctrlfence.NewClient does so for Delete and every
// subresource write.
//
// # What is and is not fenced
//
// The mark is per object: the newest token that wrote it. So:
//
//   - Only writers that stamp are fenced. A write that leaves the
//     annotation as it is (a patch that does not mention it, an update of
//     an object read with the newest token) is judged as a write with that
//     token and admitted, and so is every write to an object that carries
//     no token (without RequireToken). Writers that do not stamp, kubectl
//     users and other controllers, are not fenced; removing the token is.
//   - A successor fences an object from its first stamped write to it on:
//     until then the object carries the old holder's token, and the old
//     holder's late writes with it are admitted. A new leader that must
//     cut off its predecessor at once stamps the objects it owns when it
//     starts (StampObject).
//   - Creating an object that does not exist yet cannot be stale: there
//     is no mark to compare with. A late create of a new name lands,
//     carrying the old token, which the successor's next stamped write
//     replaces. Creates are checked for the lock (wrong_lock), and for a
//     token at all with RequireToken.
//   - The policy trusts the annotation of an authenticated writer: a
//     writer with RBAC rights can claim any token, a higher one included.
//     Keep write access to the fenced resources to the controller's
//     service account and the break-glass identities, or add the webhook.
//   - DeleteCollection (DeleteAllOf) and subresources other than status
//     (scale, eviction) are not fenced.
//
// # The stricter option: a webhook
//
// NewWebhook is a validating admission webhook (an http.Handler to serve
// over HTTPS; WebhookConfiguration registers it, failing closed) that
// admits a token only when a TokenVerifier (lease.Verifier) confirms
// against etcd that it is its lock's current holder's: a forged token, a
// higher one included, is refused as unverified, and so is every write
// while etcd cannot be reached ("fencekit: failed"). Install it next to
// the policy, which keeps the missing, stale and DELETE/status parts. It
// costs an HTTPS call and an etcd read per fenced write.
//
// Cost: on 2 shared cores an Update of a fenced config map took about
// 1.5x the time of an unfenced one at p50 (+0.8 ms) where the same writes
// unselected by the binding measured 1.2x; see BenchmarkUpdate. The
// webhook measured about 2x (+1.9 ms) at p50 and 1.15x at p99 (TestWebhook
// logs it).
package kubefence
