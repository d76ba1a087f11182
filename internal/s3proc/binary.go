// Package s3proc runs versitygw (github.com/versity/versitygw), an
// S3-compatible object server, for tests as a separate process: its posix
// backend in a directory of the test's own, on a free 127.0.0.1 port, with
// fixed test credentials, stopped by its PID.
//
// The server is built from tools/versitygw, a module of its own that pins
// the release and is not in go.work (its dependencies never enter the
// workspace's module graph). Building it takes minutes on a cold machine,
// so it is an explicit step before any test starts: BuildCommand calls
// Binary, which builds into the user cache directory
// (os.UserCacheDir()/fencekit/versitygw-<release>-<key>, keyed by release,
// the tool module's go.mod and go.sum and the Go version). Tests only look
// the binary up (Built) and skip, naming the command, when it is missing;
// with FENCEKIT_REQUIRE_S3=1 (CI) they fail instead.
//
// It is test support: no library package imports it.
package s3proc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/fencekit/fencekit/internal/toolbuild"
)

// Environment variables of the tests that need an S3 server.
const (
	// EnvBinary names a versitygw binary to run instead of the built one.
	EnvBinary = "FENCEKIT_VERSITYGW_BIN"
	// EnvRequire, set to "1", makes tests that find no server binary fail
	// instead of skipping (CI sets it).
	EnvRequire = "FENCEKIT_REQUIRE_S3"
	// BuildTimeout bounds a build by BuildCommand.
	BuildTimeout = 15 * time.Minute
)

// BuildCommand builds the versitygw binary into the cache Built reads;
// run it in the repository root.
const BuildCommand = "go run ./internal/s3proc/cmd/buildversitygw"

// ErrNotBuilt reports that the versitygw binary has not been built yet;
// the error that matches it, a *NotBuiltError, says how to build it.
var ErrNotBuilt = errors.New("s3proc: versitygw not built")

// NotBuiltError reports a server binary that Built did not find. It
// matches ErrNotBuilt.
type NotBuiltError struct {
	// Release is the pinned release, such as "1.8.0".
	Release string
	// Root is the repository checkout that tools/versitygw is in.
	Root string
}

// Error says how to build the binary.
func (e *NotBuiltError) Error() string {
	return fmt.Sprintf("s3proc: versitygw %s is not built (tests never build it under their deadline); "+
		"build it once (about 2.5 minutes cold) with\n\t(cd %s && %s)\nor set %s to a versitygw binary",
		e.Release, e.Root, BuildCommand, EnvBinary)
}

// Is reports whether target is ErrNotBuilt.
func (e *NotBuiltError) Is(target error) bool { return target == ErrNotBuilt }

// serverModule is the module whose release tools/versitygw pins.
const serverModule = "github.com/versity/versitygw"

// serverPackage is the main package built.
const serverPackage = serverModule + "/cmd/versitygw"

// target is where the binary comes from and goes to.
type target struct {
	release string // "1.8.0"
	src     string // tools/versitygw
	bin     string // the binary's path in the cache
}

// Release returns the versitygw release that tools/versitygw pins, such
// as "1.8.0".
func Release() (string, error) {
	t, err := locate()
	return t.release, err
}

// Built returns the path of the versitygw binary without building one:
// EnvBinary's value when set, otherwise the binary Binary built. When that
// is not there it returns a *NotBuiltError (matching ErrNotBuilt) that says
// how to build it.
func Built() (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	t, err := locate()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(t.bin); err != nil {
		return "", &NotBuiltError{Release: t.release, Root: filepath.Dir(filepath.Dir(t.src))}
	}
	return t.bin, nil
}

// Binary returns the path of the versitygw binary, building it when it is
// not built yet: EnvBinary's value when set, otherwise tools/versitygw's
// pinned release built with the go command into the cache. Concurrent
// callers, in this process or others, wait for one build. ctx bounds the
// build, which takes minutes on a cold machine: tests use Built instead.
func Binary(ctx context.Context) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	t, err := locate()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(t.bin); err == nil {
		return t.bin, nil
	}
	unlock, err := toolbuild.Lock(filepath.Join(filepath.Dir(t.bin), "versitygw-build.lock"))
	if err != nil {
		return "", fmt.Errorf("s3proc: lock the build: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(t.bin); err == nil {
		return t.bin, nil // built by another process while we waited
	}
	if err := toolbuild.Build(ctx, t.src, t.bin, nil, serverPackage); err != nil {
		return "", fmt.Errorf("s3proc: build versitygw %s (or set %s): %w", t.release, EnvBinary, err)
	}
	return t.bin, nil
}

// locate finds the sources, pinned release and cache path of the binary.
func locate() (target, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return target{}, fmt.Errorf("s3proc: cannot locate tools/versitygw; set %s", EnvBinary)
	}
	src := filepath.Join(filepath.Dir(file), "..", "..", "tools", "versitygw")
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return target{}, fmt.Errorf("s3proc: no tools/versitygw next to this package (%w); set %s", err, EnvBinary)
	}
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		return target{}, fmt.Errorf("s3proc: %w", err)
	}
	release := toolbuild.Pinned(mod, serverModule)
	if release == "" {
		return target{}, fmt.Errorf("s3proc: tools/versitygw/go.mod requires no %s", serverModule)
	}
	h := sha256.New()
	for _, b := range [][]byte{[]byte(runtime.Version()), mod, sum} {
		h.Write(b)
		h.Write([]byte{0})
	}
	dir, err := toolbuild.CacheDir("")
	if err != nil {
		return target{}, fmt.Errorf("s3proc: %w", err)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	return target{release: release, src: src, bin: filepath.Join(dir, "versitygw-"+release+"-"+key)}, nil
}
