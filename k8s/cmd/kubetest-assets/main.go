// Command kubetest-assets builds the kube-apiserver and etcd binaries that
// package kubetest runs (see kubetest.Assets), when they are not built
// yet, and prints the directory that holds them: the layout of
// controller-runtime's KUBEBUILDER_ASSETS.
//
//	cd k8s && export KUBEBUILDER_ASSETS=$(go run ./cmd/kubetest-assets)
//
// A cold build takes about 10 minutes on 2 cores; a warm one returns at
// once. It is the explicit build step of the k8s module's API-server
// tests, which skip (or fail, under FENCEKIT_REQUIRE_KUBE=1) without it.
package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fencekit/fencekit/internal/toolbuild"
	"github.com/fencekit/fencekit/k8s/kubetest"
)

func main() {
	toolbuild.Main("kubetest-assets: ", 45*time.Minute, func(ctx context.Context, w io.Writer) error {
		start := time.Now()
		dir, err := kubetest.Assets(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "kubetest-assets: kube-apiserver %s and etcd %s ready in %s\n",
			kubetest.Version, kubetest.EtcdVersion, time.Since(start).Round(time.Second))
		fmt.Println(dir)
		return nil
	})
}
