package kubefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// grantWriters lets the group fencekit:writers write config maps and
// deployments (and their status) everywhere: the least the tests need.
func grantWriters(ctx context.Context, admin kubernetes.Interface) error {
	verbs := []string{"get", "list", "create", "update", "patch", "delete"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fencekit-writers"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status"}, Verbs: verbs},
			{APIGroups: []string{widgets.Group}, Resources: []string{"widgets", "widgets/status"}, Verbs: verbs},
		},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	rb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fencekit-writers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fencekit-writers"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "fencekit:writers"}},
	}
	_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, rb, metav1.CreateOptions{})
	return err
}

// waitEnforced waits until the API server refuses a stale write to a
// probe config map: a new binding takes about a second to take effect.
func waitEnforced(ctx context.Context, admin kubernetes.Interface) error {
	if err := createNamespace(ctx, admin, "probe"); err != nil {
		return err
	}
	cms := admin.CoreV1().ConfigMaps("probe")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}
	if err := kubefence.Stamp(cm, fence.Token{Lock: testLock, Revision: 2}); err != nil {
		return err
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := kubefence.Stamp(cm, fence.Token{Lock: testLock, Revision: 1}); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if errors.Is(kubefence.Refusal(err), fence.ErrStale) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("policy not enforced after 20 s: last update: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createNamespace creates the namespace name, labelled as fenced.
func createNamespace(ctx context.Context, admin kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{fencedLabel: "fenced"},
	}}
	_, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}

var nsCount atomic.Int64

// namespace creates a new fenced namespace for t and returns its name.
func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCount.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 63 {
		name = name[:63]
	}
	name = strings.TrimRight(name, "-")
	require.NoError(t, createNamespace(t.Context(), adminClient(t), name))
	return name
}

// adminClient returns a clientset for the shared server's admin.
func adminClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(server(t).AdminConfig())
}

// userClient returns a clientset for user, a name in the token file.
func userClient(t testing.TB, user string) kubernetes.Interface {
	t.Helper()
	cfg, err := server(t).Config(user)
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(cfg)
}

// term returns ctx carrying the token of testLock at revision rev: the
// leader's ctx of that term.
func term(ctx context.Context, rev int64) context.Context {
	return fence.NewContext(ctx, fence.Token{Lock: testLock, Revision: rev})
}

// refused asserts that err is the policy's refusal with outcome want.
func refused(t *testing.T, err error, want error) *fence.RefusedError {
	t.Helper()
	err = kubefence.Refusal(err)
	require.ErrorIs(t, err, want)
	var r *fence.RefusedError
	require.ErrorAs(t, err, &r)
	return r
}

// widgets is a custom resource with a status subresource: its status
// writes reset metadata before admission, as custom resources' do.
var widgets = schema.GroupVersionResource{Group: "fencekit.test", Version: "v1", Resource: "widgets"}

// createWidgetCRD creates the custom resource definition of widgets and
// waits until they can be listed.
func createWidgetCRD(ctx context.Context, s *kubetest.Server) error {
	dyn, err := dynamic.NewForConfig(s.AdminConfig())
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.fencekit.test"},
		"spec": map[string]any{
			"group": widgets.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := dyn.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("widgets not served after 20 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
