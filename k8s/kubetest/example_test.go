package kubetest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/k8s/kubetest"
	"k8s.io/client-go/kubernetes"
)

// Example starts an API server outside a test (tests call kubetest.Start,
// which also skips them when the binaries are not built) and asks it its
// version. It is not run by go test: it needs `go run ./cmd/kubetest-assets`
// first.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := kubetest.StartServer(ctx, kubetest.Config{})
	if err != nil {
		log.Fatal(err) // matches kubetest.ErrNotBuilt without the binaries
	}
	defer s.Close()
	cs, err := kubernetes.NewForConfig(s.AdminConfig())
	if err != nil {
		log.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.GitVersion)
}
