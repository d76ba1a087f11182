package fencelock_test

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	// client-go logs through klog; the tests read the callbacks instead.
	klog.SetLogger(logr.Discard())
	// client-go leaves no goroutine behind; the one ignored is etcd's.
	goleak.VerifyTestMain(m,
		// etcd's own (see fencekit's internal/testsupport/testkit.EtcdLeaks): a peer's
		// /version request to a member that stopped can block for ever.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"),
	)
}
