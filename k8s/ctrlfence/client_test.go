package ctrlfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/ctrlfence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestNewClient: through a real API server with kubefence's policy, every
// write of the fenced controller-runtime client with a stale token is
// refused with a *fence.RefusedError (create, update, the patch types,
// apply, status update and patch, delete), the current token's are
// admitted, and a ctx without a token sends nothing.
func TestNewClient(t *testing.T) {
	s := kubetest.Start(t, kubetest.Config{Users: []kubetest.User{{Name: "controller"}}})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	setUpPolicy(t, admin)
	cfg, err := s.Config("controller")
	require.NoError(t, err)
	raw, err := client.NewWithWatch(cfg, client.Options{})
	require.NoError(t, err)
	c := ctrlfence.NewClient(raw)

	ctx := t.Context()
	current := fence.NewContext(ctx, fence.Token{Lock: "orders", Revision: 9})
	stale := fence.NewContext(ctx, fence.Token{Lock: "orders", Revision: 5})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "fenced"}, Data: map[string]string{"v": "0"}}
	require.NoError(t, c.Create(current, cm))
	assert.Equal(t, "9:orders", cm.Annotations[kubefence.Annotation])

	isStale := func(name string, err error) {
		t.Helper()
		assert.ErrorIs(t, err, fence.ErrStale, name)
		var r *fence.RefusedError
		if assert.ErrorAs(t, err, &r, name) {
			assert.Equal(t, int64(5), r.Token.Revision, name)
			assert.Equal(t, int64(9), r.Mark.Revision, name)
		}
	}
	orig := cm.DeepCopy()
	cm.Data["v"] = "late"
	isStale("update", c.Update(stale, cm.DeepCopy()))
	isStale("merge patch", c.Patch(stale, cm.DeepCopy(), client.MergeFrom(orig)))
	isStale("strategic merge patch", c.Patch(stale, cm.DeepCopy(), client.StrategicMergeFrom(orig)))
	isStale("JSON patch", c.Patch(stale, cm.DeepCopy(),
		client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/v","value":"late"}]`))))
	ac := corev1ac.ConfigMap("c", "fenced").WithData(map[string]string{"v": "applied"})
	isStale("apply", c.Apply(stale, ac, client.FieldOwner("test"), client.ForceOwnership))
	require.NoError(t, c.Apply(current, ac, client.FieldOwner("test"), client.ForceOwnership))
	require.NoError(t, c.Patch(current, cm, client.MergeFrom(orig)))

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	assert.Equal(t, "late", cm.Data["v"], "the current term's merge patch, after its apply")
	require.ErrorIs(t, c.Update(ctx, cm), fence.ErrMissing)

	d := deployment()
	require.NoError(t, c.Create(current, d))
	d.Status.ObservedGeneration = 7
	isStale("status update", c.Status().Update(stale, d.DeepCopy()))
	require.NoError(t, c.Status().Update(current, d))
	dOrig := d.DeepCopy()
	d.Status.ObservedGeneration = 8
	isStale("status patch", c.Status().Patch(stale, d.DeepCopy(), client.MergeFrom(dOrig)))
	require.NoError(t, c.Status().Patch(current, d, client.MergeFrom(dOrig)))
	assert.Equal(t, int64(8), d.Status.ObservedGeneration)

	isStale("delete", c.Delete(stale, cm))
	require.NoError(t, c.Delete(current, cm))
}

// setUpPolicy installs kubefence's policy for lock "orders" on config maps
// and deployments, creates the namespace "fenced", lets the user
// "controller" write there, and waits until the policy is enforced.
func setUpPolicy(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fenced"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	_, err = admin.RbacV1().Roles("fenced").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status"}, Verbs: verbs},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings("fenced").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "controller"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p := kubefence.Policy{Lock: "orders", Resources: []schema.GroupResource{
		{Resource: "configmaps"}, {Group: "apps", Resource: "deployments"},
	}}
	require.NoError(t, kubefence.Install(ctx, admin, p))

	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}
	require.NoError(t, kubefence.Stamp(probe, fence.Token{Lock: "orders", Revision: 2}))
	probe, err = admin.CoreV1().ConfigMaps("fenced").Create(ctx, probe, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, kubefence.Stamp(probe, fence.Token{Lock: "orders", Revision: 1}))
	require.Eventually(t, func() bool {
		_, err := admin.CoreV1().ConfigMaps("fenced").Update(context.Background(), probe,
			metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}, 20*time.Second, 50*time.Millisecond, "policy not enforced")
}

// deployment returns a minimal deployment in "fenced".
func deployment() *appsv1.Deployment {
	labels := map[string]string{"app": "d"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "fenced"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example"}}},
			},
		},
	}
}
