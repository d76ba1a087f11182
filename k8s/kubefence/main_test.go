package kubefence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The identities of the shared server's token file.
const (
	writerUser     = "writer"        // in group fencekit:writers, which RBAC lets write
	breakGlassUser = "break-glass"   // in fencekit:writers too, and named by the policy
	testLock       = "orders"        // the lock of the tests' policy
	fencedLabel    = "fencekit-test" // namespaces labelled fenced are fenced
)

// testPolicy is the policy the shared server has installed: config maps
// and deployments in namespaces labelled fencedLabel=fenced.
var testPolicy = kubefence.Policy{
	Lock: testLock,
	Resources: []schema.GroupResource{
		{Group: "", Resource: "configmaps"}, {Group: "apps", Resource: "deployments"},
		widgets.GroupResource(),
	},
	BreakGlassUsers:   []string{breakGlassUser},
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{fencedLabel: "fenced"}},
}

var shared struct {
	once sync.Once
	srv  *kubetest.Server
	err  error
}

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the package's shared API server, started on first use,
// with testPolicy installed and enforced. Without binaries it skips t (or
// fails it under FENCEKIT_REQUIRE_KUBE=1) with the build command.
func server(t testing.TB) *kubetest.Server {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kubetest.StartTimeout)
		defer cancel()
		cfg := kubetest.Config{Users: []kubetest.User{
			{Name: writerUser, Groups: []string{"fencekit:writers"}},
			{Name: breakGlassUser, Groups: []string{"fencekit:writers"}},
		}}
		shared.srv, shared.err = kubetest.StartServer(ctx, cfg)
		if shared.err == nil {
			shared.err = setUp(ctx, shared.srv)
		}
	})
	if errors.Is(shared.err, kubetest.ErrNotBuilt) && os.Getenv(kubetest.EnvRequire) != "1" {
		t.Skipf("%v; %s=1 makes this test fail instead", shared.err, kubetest.EnvRequire)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// setUp grants the writers' group what the tests do, installs testPolicy
// and waits until the API server enforces it.
func setUp(ctx context.Context, s *kubetest.Server) error {
	admin, err := kubernetes.NewForConfig(s.AdminConfig())
	if err != nil {
		return err
	}
	if err := createWidgetCRD(ctx, s); err != nil {
		return err
	}
	if err := grantWriters(ctx, admin); err != nil {
		return err
	}
	if err := kubefence.Install(ctx, admin, testPolicy); err != nil {
		return err
	}
	start := time.Now()
	if err := waitEnforced(ctx, admin); err != nil {
		return err
	}
	enforcedAfter = time.Since(start)
	return nil
}

// enforcedAfter is how long the installed policy took to be enforced.
var enforcedAfter time.Duration
