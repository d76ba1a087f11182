package admin_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease/admin"
	"github.com/stretchr/testify/assert"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}

// New refuses what no Admin can work with, before any request.
func TestNewValidates(t *testing.T) {
	_, err := admin.New(nil, "/p/")
	assert.Error(t, err, "nil etcd client")
	cli := &clientv3.Client{} // never used: New sends nothing
	for _, prefix := range []string{"", "/"} {
		_, err = admin.New(cli, prefix)
		assert.Error(t, err, "prefix %q", prefix)
	}
	_, err = admin.New(cli, "/p", admin.WithLogger(nil))
	assert.Error(t, err, "nil logger")
	a, err := admin.New(cli, "/p")
	assert.NoError(t, err)
	assert.NotNil(t, a)
}
