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
	"io"

	"github.com/fencekit/fencekit/internal/s3proc"
	"github.com/fencekit/fencekit/internal/toolbuild"
)

func main() {
	toolbuild.Main("", 0, func(ctx context.Context, w io.Writer) error {
		return toolbuild.Ensure(ctx, w, toolbuild.Tool{
			What: func() (string, error) {
				release, err := s3proc.Release()
				return "versitygw " + release, err
			},
			Built:    s3proc.Built,
			NotBuilt: s3proc.ErrNotBuilt,
			Build:    s3proc.Binary,
			Timeout:  s3proc.BuildTimeout,
		})
	})
}
