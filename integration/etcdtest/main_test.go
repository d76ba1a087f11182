package etcdtest_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.EtcdLeaks...) }
