// Command buildversitygw builds the versitygw S3 server that objguard's
// tests run (see internal/s3proc), before any test starts, so that no
// test's deadline spans a build of minutes. Run it in the repository root:
//
//	go run ./internal/s3proc/cmd/buildversitygw
//
// A binary already in the cache is not built again, and nothing is printed
// for it; a build prints "building versitygw 1.8.0, first run only…" on
// stderr first and its duration after. With FENCEKIT_VERSITYGW_BIN set
// there is nothing to build. It exits 1 when the build fails.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/fencekit/fencekit/internal/s3proc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// run builds the binary unless it is built, reporting progress to w.
func run(ctx context.Context, w io.Writer) error {
	if _, err := s3proc.Built(); err == nil {
		return nil
	} else if !errors.Is(err, s3proc.ErrNotBuilt) {
		return err
	}
	release, err := s3proc.Release()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "building versitygw %s, first run only…\n", release)
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, s3proc.BuildTimeout)
	defer cancel()
	bin, err := s3proc.Binary(bctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "built versitygw %s in %s: %s\n", release, time.Since(start).Round(time.Second), bin)
	return nil
}
