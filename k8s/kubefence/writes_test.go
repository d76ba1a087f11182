package kubefence_test

import (
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// TestPatchTypes: every PATCH type is fenced once the client stamps its
// body: merge, strategic merge, JSON patch and server-side apply, each
// refused with a stale token and admitted with the current one.
func TestPatchTypes(t *testing.T) {
	cs := userClient(t, writerUser)
	for _, tc := range []struct {
		name string
		pt   types.PatchType
		body func(v string) []byte
		opts metav1.PatchOptions
	}{
		{"merge", types.MergePatchType, func(v string) []byte {
			return []byte(`{"data":{"v":"` + v + `"}}`)
		}, metav1.PatchOptions{}},
		{"strategic", types.StrategicMergePatchType, func(v string) []byte {
			return []byte(`{"data":{"v":"` + v + `"}}`)
		}, metav1.PatchOptions{}},
		{"json", types.JSONPatchType, func(v string) []byte {
			return []byte(`[{"op":"replace","path":"/data/v","value":"` + v + `"}]`)
		}, metav1.PatchOptions{}},
		{"apply", types.ApplyYAMLPatchType, func(v string) []byte {
			return []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  v: " + v + "\n")
		}, metav1.PatchOptions{FieldManager: "fencekit-test", Force: ptr.To(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := fencedConfigMap(t, cs, 9)
			cms := cs.CoreV1().ConfigMaps(cm.Namespace)

			stale := term(t.Context(), 5)
			data, err := kubefence.StampPatchContext(stale, tc.pt, tc.body("late"), "")
			require.NoError(t, err)
			_, err = cms.Patch(stale, "c", tc.pt, data, tc.opts)
			refused(t, err, fence.ErrStale)

			current := term(t.Context(), 9)
			data, err = kubefence.StampPatchContext(current, tc.pt, tc.body("current"), "")
			require.NoError(t, err)
			got, err := cms.Patch(current, "c", tc.pt, data, tc.opts)
			require.NoError(t, err)
			assert.Equal(t, "current", got.Data["v"])

			// Unstamped, a patch leaves the object's token in place and is
			// judged as a write with it: only stamping clients are fenced
			// (see the package doc). (A server-side apply that leaves out
			// an annotation its field manager alone owned removes it: that
			// is refused as missing; here the creator co-owns it.)
			_, err = cms.Patch(stale, "c", tc.pt, tc.body("unstamped"), tc.opts)
			require.NoError(t, err)
		})
	}
}

// TestStatusSubresource: the API server resets metadata on a status write
// before admission, so the policy cannot see a status write's token (an
// unstamped, stale status write passes it); StampObject then a status
// write preconditioned on the stamped resourceVersion fences it.
func TestStatusSubresource(t *testing.T) {
	cs := userClient(t, writerUser)
	ns := namespace(t)
	deps := cs.AppsV1().Deployments(ns)
	d := deployment(ns)
	require.NoError(t, kubefence.StampContext(term(t.Context(), 9), d))
	d, err := deps.Create(t.Context(), d, metav1.CreateOptions{})
	require.NoError(t, err)

	// A deployment's status write keeps the annotation it sends, so the
	// policy, which matches deployments/status too, checks it.
	raw := d.DeepCopy()
	require.NoError(t, kubefence.Stamp(raw, fence.Token{Lock: testLock, Revision: 5}))
	raw.Status.ObservedGeneration = 41
	_, err = deps.UpdateStatus(t.Context(), raw, metav1.UpdateOptions{})
	refused(t, err, fence.ErrStale)
	delete(raw.Annotations, kubefence.Annotation)
	_, err = deps.UpdateStatus(t.Context(), raw, metav1.UpdateOptions{})
	refused(t, err, fence.ErrMissing)

	// The stale leader's stamp is refused, so it never writes status.
	stale := term(t.Context(), 5)
	_, err = kubefence.StampObject(stale, deps.Patch, d.Name, "")
	refused(t, err, fence.ErrStale)

	// The current leader stamps, then writes status on that version.
	current := term(t.Context(), 9)
	stamped, err := kubefence.StampObject(current, deps.Patch, d.Name, "")
	require.NoError(t, err)
	stamped.Status.ObservedGeneration = 42
	_, err = deps.UpdateStatus(current, stamped, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A successor stamping in between makes the earlier holder's status
	// write conflict instead of land.
	stamped, err = kubefence.StampObject(current, deps.Patch, d.Name, "")
	require.NoError(t, err)
	_, err = kubefence.StampObject(term(t.Context(), 10), deps.Patch, d.Name, "")
	require.NoError(t, err)
	stamped.Status.ObservedGeneration = 43
	_, err = deps.UpdateStatus(current, stamped, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "status write after a successor's stamp: %v", err)

	got, err := deps.Get(t.Context(), d.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(42), got.Status.ObservedGeneration)
}

// TestDelete: a DELETE carries no body for the policy to check; a stale
// leader's StampObject is refused, and the current leader's delete is
// preconditioned on the resourceVersion of its stamp.
func TestDelete(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)
	cms := cs.CoreV1().ConfigMaps(cm.Namespace)

	_, err := kubefence.StampObject(term(t.Context(), 5), cms.Patch, "c", "")
	refused(t, err, fence.ErrStale)

	ctx := term(t.Context(), 9)
	stamped, err := kubefence.StampObject(ctx, cms.Patch, "c", "")
	require.NoError(t, err)
	// A stamp with a stale precondition is a Conflict, not a refusal.
	stamped.Data["v"] = "1"
	_, err = update(ctx, cs, stamped)
	require.NoError(t, err)
	_, err = kubefence.StampObject(ctx, cms.Patch, "c", stamped.ResourceVersion)
	assert.True(t, apierrors.IsConflict(err), "%v", err)

	stamped, err = kubefence.StampObject(ctx, cms.Patch, "c", "")
	require.NoError(t, err)
	err = cms.Delete(ctx, "c", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: &stamped.UID, ResourceVersion: &stamped.ResourceVersion,
	}})
	require.NoError(t, err)
}

// deployment returns a minimal deployment (no controller manager runs, so
// it never gets pods).
func deployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "d"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example"}}},
			},
		},
	}
}

// TestStatusResetByServer: a custom resource's status write resets
// metadata before admission, so the policy sees the object's own token
// whatever the request says (an unstamped stale status write passes it);
// StampObject, then a status write preconditioned on the stamped
// resourceVersion, fences it.
func TestStatusResetByServer(t *testing.T) {
	cfg, err := server(t).Config(writerUser)
	require.NoError(t, err)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ws := dyn.Resource(widgets).Namespace(namespace(t))
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fencekit.test/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"},
	}}
	require.NoError(t, kubefence.StampContext(term(t.Context(), 9), w))
	w, err = ws.Create(t.Context(), w, metav1.CreateOptions{})
	require.NoError(t, err)

	raw := w.DeepCopy()
	require.NoError(t, kubefence.Stamp(raw, fence.Token{Lock: testLock, Revision: 5}))
	raw.Object["status"] = map[string]any{"phase": "late"}
	raw, err = ws.UpdateStatus(t.Context(), raw, metav1.UpdateOptions{})
	require.NoError(t, err, "the policy cannot see a custom resource's status write's token")
	tok, err := kubefence.TokenOf(raw)
	require.NoError(t, err)
	assert.Equal(t, int64(9), tok.Revision, "the status write left the token alone")

	_, err = kubefence.StampObject(term(t.Context(), 5), ws.Patch, "w", "")
	refused(t, err, fence.ErrStale)

	current := term(t.Context(), 9)
	stamped, err := kubefence.StampObject(current, ws.Patch, "w", "")
	require.NoError(t, err)
	_, err = kubefence.StampObject(term(t.Context(), 10), ws.Patch, "w", "")
	require.NoError(t, err)
	stamped.Object["status"] = map[string]any{"phase": "after successor"}
	_, err = ws.UpdateStatus(current, stamped, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "status write after a successor's stamp: %v", err)
}
