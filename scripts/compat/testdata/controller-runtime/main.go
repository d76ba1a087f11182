// Command compat is a controller next to controller-runtime and client-go
// (scripts/compat/run.sh builds it without and with fencekit).
package main

import (
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	_ = kubernetes.NewForConfig
	_ client.Client
)

func main() { _ = ctrl.NewManager }
