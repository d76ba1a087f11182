// Command buildetcd builds the etcd server binaries that fencekit's tests
// run (see internal/etcdproc), before any test starts, so that no test's
// deadline spans a build of minutes. scripts/test.sh, scripts/matrix.sh
// and CI run it before go test; run it in the repository root:
//
//	go run ./internal/etcdproc/cmd/buildetcd          # FENCEKIT_ETCD_VERSION's, or 3.7
//	go run ./internal/etcdproc/cmd/buildetcd 3.5 3.6  # those versions
//
// A binary already in the cache is not built again, and nothing is
// printed for it; a build prints "building etcd 3.7.3 server, first run
// only…" on stderr first and its duration after. With FENCEKIT_ETCD_BIN
// set there is nothing to build. It exits 1 when a build fails.
package main

import (
	"context"
	"io"
	"os"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/toolbuild"
)

func main() {
	toolbuild.Main("", 0, func(ctx context.Context, w io.Writer) error { return run(ctx, os.Args[1:], w) })
}

// run builds each version in versions (etcdproc.Version() when none) that
// is not built yet, reporting progress to w.
func run(ctx context.Context, versions []string, w io.Writer) error {
	if len(versions) == 0 {
		versions = []string{etcdproc.Version()}
	}
	for _, v := range versions {
		err := toolbuild.Ensure(ctx, w, toolbuild.Tool{
			What: func() (string, error) {
				release, err := etcdproc.Release(v)
				return "etcd " + release + " server", err
			},
			Built:    func() (string, error) { return etcdproc.Built(v) },
			NotBuilt: etcdproc.ErrNotBuilt,
			Build:    func(ctx context.Context) (string, error) { return etcdproc.Binary(ctx, v) },
			Timeout:  etcdproc.BuildTimeout,
		})
		if err != nil {
			return err
		}
	}
	return nil
}
