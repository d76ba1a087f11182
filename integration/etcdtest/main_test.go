//go:build unix

package etcdtest_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"

	"github.com/fencekit/fencekit/integration/faults"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The walkthrough's workers are this test binary, run again.
	faults.ServeWorker(map[string]faults.WorkerFunc{"orders": ordersWorker})
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}
