//go:build unix

package integration

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"

	"github.com/fencekit/fencekit/integration/faults"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A worker process started by the safety suite runs its worker and
	// exits here; the test process goes on to run the tests.
	faults.ServeWorker(map[string]faults.WorkerFunc{
		workerName:   runProcessWorker,
		memberWorker: runEtcdMember,
		holderWorker: runLockHolder,
	})
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}
