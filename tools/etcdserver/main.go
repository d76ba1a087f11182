// Command etcdserver is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain)
// built from etcd's server module at a pinned version: go.mod pins the
// newest v3.7 release, go.v3.6.mod and go.v3.5.mod the newest v3.6 and
// v3.5 releases. It takes etcd's flags. fencekit's test harness
// (internal/etcdproc) builds it on first use and runs its members as
// separate processes; nothing in fencekit's library imports it.
//
//	GOWORK=off go build -modfile=go.v3.6.mod -o etcd-3.6 .
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
