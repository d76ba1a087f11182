// Command compat is a program next to Kubernetes' API server storage:
// the package that failed to build when fencekit lifted OpenTelemetry
// (scripts/compat/run.sh builds it without and with fencekit).
package main

import (
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
)

var _ = factory.Create

func main() { _ = storagebackend.Config{} }
