package admin_test

import (
	"log"

	"github.com/fencekit/fencekit/internal/etcdproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// exampleEtcd starts a one-member etcd for the examples (a separate
// process; a user's program connects to its own cluster instead) and
// returns a client and a function that closes both.
func exampleEtcd() (*clientv3.Client, func()) {
	cluster, err := etcdproc.Start(etcdproc.Config{NoFsync: true})
	if err != nil {
		log.Fatal(err)
	}
	cli, err := cluster.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	return cli, func() { cli.Close(); cluster.Close() }
}
