package kubetest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestStart starts a Server and checks its version, its identities (the
// admin may do anything, a token-file user and a service account only
// what RBAC grants them) and its stop; it logs the start time and the
// API server's resident memory.
func TestStart(t *testing.T) {
	start := time.Now()
	s := kubetest.Start(t, kubetest.Config{Users: []kubetest.User{{Name: "alice", Groups: []string{"team"}}}})
	took := time.Since(start)
	ctx := t.Context()

	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	v, err := admin.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, kubetest.Version, v.GitVersion)
	_, err = admin.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err)

	aliceCfg, err := s.Config("alice")
	require.NoError(t, err)
	alice := kubernetes.NewForConfigOrDie(aliceCfg)
	_, err = alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "alice without RBAC: %v", err)
	_, err = s.Config("bob")
	assert.Error(t, err)

	saCfg, err := s.ServiceAccountConfig(ctx, "kubetest", "writer")
	require.NoError(t, err)
	sa := kubernetes.NewForConfigOrDie(saCfg)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	_, err = sa.CoreV1().ConfigMaps("kubetest").Create(ctx, cm, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "service account without RBAC: %v", err)
	grant(t, admin, "kubetest", "writer")
	require.Eventually(t, func() bool {
		_, err = sa.CoreV1().ConfigMaps("kubetest").Create(ctx, cm, metav1.CreateOptions{})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "service account after its RoleBinding: %v", err)

	rss, err := kubetest.RSS(s.PID())
	if err == nil {
		t.Logf("kube-apiserver %s ready in %s, %d MiB resident", kubetest.Version, took.Round(10*time.Millisecond), rss>>20)
	}
	require.NoError(t, s.Close())
	_, err = os.Stat(s.LogFile())
	assert.NoError(t, err, "Close keeps a Dir it did not make")
}

// grant lets the service account ns/name read and write config maps in
// ns.
func grant(t *testing.T, admin kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"},
		}},
	}
	_, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	require.NoError(t, err)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
	require.NoError(t, err)
}

// TestEnvtest starts controller-runtime's envtest.Environment on the
// harness's binaries (the KUBEBUILDER_ASSETS layout of LookupAssets).
func TestEnvtest(t *testing.T) {
	dir, err := kubetest.LookupAssets()
	if errors.Is(err, kubetest.ErrNotBuilt) && os.Getenv(kubetest.EnvRequire) != "1" {
		t.Skipf("%v; %s=1 makes this test fail instead", err, kubetest.EnvRequire)
	}
	require.NoError(t, err)
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, env.Stop()) })
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "envtest"}}
	_, err = cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
	v, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, kubetest.Version, v.GitVersion)
}
