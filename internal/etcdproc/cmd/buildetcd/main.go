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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// run builds each version in versions (etcdproc.Version() when none) that
// is not built yet, reporting progress to w.
func run(ctx context.Context, versions []string, w io.Writer) error {
	if len(versions) == 0 {
		versions = []string{etcdproc.Version()}
	}
	for _, v := range versions {
		if _, err := etcdproc.Built(v); err == nil {
			continue
		} else if !errors.Is(err, etcdproc.ErrNotBuilt) {
			return err
		}
		release, err := etcdproc.Release(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "building etcd %s server, first run only…\n", release)
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, etcdproc.BuildTimeout)
		bin, err := etcdproc.Binary(bctx, v)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "built etcd %s server in %s: %s\n", release, time.Since(start).Round(time.Second), bin)
	}
	return nil
}
