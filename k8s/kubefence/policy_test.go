package kubefence_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// fencedConfigMap creates, as the writer in term rev, a config map in a
// new fenced namespace and returns it.
func fencedConfigMap(t *testing.T, cs kubernetes.Interface, rev int64) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: namespace(t)},
		Data:       map[string]string{"v": "0"},
	}
	ctx := term(t.Context(), rev)
	require.NoError(t, kubefence.StampContext(ctx, cm))
	got, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	return got
}

// update writes cm as the leader of term rev would: stamped with its
// token, the refusal mapped.
func update(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cm = cm.DeepCopy()
	if err := kubefence.StampContext(ctx, cm); err != nil {
		return nil, err
	}
	got, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return got, kubefence.Refusal(err)
}

// TestStaleRefused: once a newer term has written an object, a write
// with an older token is refused as stale; the same token and newer ones
// are admitted.
func TestStaleRefused(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)

	cm.Data["v"] = "late"
	_, err := update(term(t.Context(), 5), cs, cm)
	r := refused(t, err, fence.ErrStale)
	assert.Equal(t, fence.Stale, r.Outcome)
	assert.Equal(t, fence.Token{Lock: testLock, Revision: 5}, r.Token)
	assert.Equal(t, fence.Token{Lock: testLock, Revision: 9}, r.Mark)
	assert.Equal(t, testLock, r.Lock)
	assert.Equal(t, "configmaps/c", r.Resource)

	cm.Data["v"] = "same term"
	cm, err = update(term(t.Context(), 9), cs, cm)
	require.NoError(t, err)
	cm.Data["v"] = "next term"
	cm, err = update(term(t.Context(), 12), cs, cm)
	require.NoError(t, err)
	_, err = update(term(t.Context(), 9), cs, cm)
	refused(t, err, fence.ErrStale)

	got, err := cs.CoreV1().ConfigMaps(cm.Namespace).Get(t.Context(), "c", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "next term", got.Data["v"])
	tok, err := kubefence.TokenOf(got)
	require.NoError(t, err)
	assert.Equal(t, int64(12), tok.Revision)
}

// TestWrongLockRefused: a token of another lock is refused, on create and
// on update, however high its revision.
func TestWrongLockRefused(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)
	other := fence.NewContext(t.Context(), fence.Token{Lock: "payments", Revision: 99})

	_, err := update(other, cs, cm)
	r := refused(t, err, fence.ErrWrongLock)
	assert.Equal(t, fence.Token{Lock: "payments", Revision: 99}, r.Token)
	assert.Equal(t, testLock, r.Lock)

	fresh := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: cm.Namespace}}
	require.NoError(t, kubefence.StampContext(other, fresh))
	_, err = cs.CoreV1().ConfigMaps(cm.Namespace).Create(other, fresh, metav1.CreateOptions{})
	refused(t, err, fence.ErrWrongLock)
}

// TestMissingRefused: a write that drops the token of an object that
// carries one is refused as missing; an object that never carried one is
// not fenced (without RequireToken).
func TestMissingRefused(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)

	delete(cm.Annotations, kubefence.Annotation)
	_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(t.Context(), cm, metav1.UpdateOptions{})
	r := refused(t, err, fence.ErrMissing)
	assert.Equal(t, fence.Token{Lock: testLock, Revision: 9}, r.Mark)

	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: cm.Namespace}}
	plain, err = cs.CoreV1().ConfigMaps(cm.Namespace).Create(t.Context(), plain, metav1.CreateOptions{})
	require.NoError(t, err, "an object without a token is not fenced")
	plain.Data = map[string]string{"v": "1"}
	_, err = cs.CoreV1().ConfigMaps(cm.Namespace).Update(t.Context(), plain, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A context without a token sends nothing.
	_, err = update(t.Context(), cs, cm)
	require.ErrorIs(t, err, fence.ErrMissing)
}

// TestMalformedRefused: an annotation that is not a token is refused as
// malformed (fence.ErrInvalid), before any CEL error could fail the
// request otherwise.
func TestMalformedRefused(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)
	for _, text := range []string{"orders", "0:orders", "9:", "99999999999999999999:orders", "9:orders:x", "-9:orders"} {
		cm.Annotations[kubefence.Annotation] = text
		_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(t.Context(), cm, metav1.UpdateOptions{})
		r := refused(t, err, fence.ErrInvalid)
		assert.Equal(t, fence.Malformed, r.Outcome, text)
	}
}

// TestBreakGlassAllowed: the identity the policy names writes whatever
// token it likes, or none; the same write by another writer is refused.
func TestBreakGlassAllowed(t *testing.T) {
	cs := userClient(t, writerUser)
	cm := fencedConfigMap(t, cs, 9)
	glass := userClient(t, breakGlassUser)

	cm.Data["v"] = "fixed by hand"
	_, err := update(term(t.Context(), 1), cs, cm)
	refused(t, err, fence.ErrStale)
	got, err := update(term(t.Context(), 1), glass, cm)
	require.NoError(t, err)
	assert.Equal(t, "fixed by hand", got.Data["v"])

	delete(got.Annotations, kubefence.Annotation)
	got, err = glass.CoreV1().ConfigMaps(cm.Namespace).Update(t.Context(), got, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.NotContains(t, got.Annotations, kubefence.Annotation)
}

// TestRequireToken: with RequireToken every matched object must carry a
// token, from its creation on.
func TestRequireToken(t *testing.T) {
	admin := adminClient(t)
	p := testPolicy
	p.Name, p.RequireToken = "fencekit.required", true
	p.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{fencedLabel: "required"}}
	require.NoError(t, kubefence.Install(t.Context(), admin, p))
	require.NoError(t, kubefence.Install(t.Context(), admin, p), "installing again updates")
	t.Cleanup(func() { assert.NoError(t, kubefence.Uninstall(context.Background(), admin, p)) })
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "required", Labels: map[string]string{fencedLabel: "required"}}}
	_, err := admin.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	require.NoError(t, err)

	cs := userClient(t, writerUser)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "required"}}
	require.Eventually(t, func() bool {
		_, err = cs.CoreV1().ConfigMaps("required").Create(t.Context(), cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}, 20*time.Second, 50*time.Millisecond, "policy not enforced")
	refused(t, err, fence.ErrMissing)
	ctx := term(t.Context(), 3)
	require.NoError(t, kubefence.StampContext(ctx, cm))
	_, err = cs.CoreV1().ConfigMaps("required").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
}
