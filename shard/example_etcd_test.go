package shard_test

import (
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// exampleEtcd starts a one-member etcd for the examples (a separate
// process; a user's program connects to its own cluster instead) and
// returns a client and a function that closes both.
func exampleEtcd() (*clientv3.Client, func()) { return etcdtest.ForExample() }
