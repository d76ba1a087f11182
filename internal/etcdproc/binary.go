package etcdproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/fencekit/fencekit/internal/toolbuild"
)

// Environment variables that choose the etcd server the harness runs.
const (
	// EnvBinary names an etcd binary to run instead of building one.
	EnvBinary = "FENCEKIT_ETCD_BIN"
	// EnvVersion chooses the server version to build: 3.5, 3.6 or 3.7
	// (DefaultVersion when unset).
	EnvVersion = "FENCEKIT_ETCD_VERSION"
	// DefaultVersion is the server version built when EnvVersion is unset.
	DefaultVersion = "3.7"
)

// Versions are the etcd server versions tools/etcdserver pins (the newest
// patch release of each minor when it was last updated).
var Versions = []string{"3.5", "3.6", "3.7"}

// Version returns the server version the harness builds: EnvVersion's
// value, or DefaultVersion.
func Version() string {
	if v := os.Getenv(EnvVersion); v != "" {
		return v
	}
	return DefaultVersion
}

// ErrNotBuilt reports that the etcd server binary of a version has not been
// built yet; the error that matches it, a *NotBuiltError, says how to build
// it.
var ErrNotBuilt = errors.New("etcdproc: etcd server not built")

// NotBuiltError reports a server binary that Built did not find. It
// matches ErrNotBuilt.
type NotBuiltError struct {
	// Version is the minor version asked for, such as "3.7".
	Version string
	// Release is the pinned release of that minor, such as "3.7.3".
	Release string
	// Root is the repository checkout that tools/etcdserver is in.
	Root string
}

// Error says how to build the binary: the test command does, or BuildCommand
// run in Root.
func (e *NotBuiltError) Error() string {
	return fmt.Sprintf("etcdproc: the etcd %s server is not built (tests never build it under their deadline): "+
		"scripts/test.sh builds it first, or build it once (a few minutes) with\n\t(cd %s && %s %s)\n"+
		"or set %s to an etcd binary", e.Release, e.Root, BuildCommand, e.Version, EnvBinary)
}

// Is reports whether target is ErrNotBuilt.
func (e *NotBuiltError) Is(target error) bool { return target == ErrNotBuilt }

// BuildCommand builds the server binaries of the versions given as its
// arguments (Version() when none) into the cache Built reads; run it in the
// repository root.
const BuildCommand = "go run ./internal/etcdproc/cmd/buildetcd"

// Built returns the path of an etcd server binary without building one:
// EnvBinary's value when set, otherwise the binary that Binary built for
// version (a minor version, such as "3.6"; "" means Version()). When that
// binary is not there it returns a *NotBuiltError (matching ErrNotBuilt)
// that says how to build it: tests call Built, never Binary, so that no
// test's deadline spans a build of minutes.
func Built(version string) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	t, err := locate(version)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(t.bin); err != nil {
		return "", &NotBuiltError{Version: t.version, Release: t.release, Root: filepath.Dir(filepath.Dir(t.src))}
	}
	return t.bin, nil
}

// Release returns the etcd release that tools/etcdserver pins for version
// (a minor version; "" means Version()), such as "3.7.3".
func Release(version string) (string, error) {
	t, err := locate(version)
	if err != nil {
		return "", err
	}
	return t.release, nil
}

// Binary returns the path of an etcd server binary: EnvBinary's value when
// set, otherwise the one tools/etcdserver builds for version (a minor
// version, such as "3.6"; "" means Version()). It builds it when it is not
// built yet, with the go command, into a cache directory keyed by version,
// sources and Go version; concurrent callers, in this process or others,
// wait for one build. ctx bounds the build, which takes minutes on a cold
// machine: tests use Built instead, and BuildCommand (which scripts/test.sh
// runs) calls Binary before any test starts.
func Binary(ctx context.Context, version string) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	t, err := locate(version)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(t.bin); err == nil {
		return t.bin, nil
	}
	unlock, err := toolbuild.Lock(filepath.Join(filepath.Dir(t.bin), "build-"+t.version+".lock"))
	if err != nil {
		return "", fmt.Errorf("etcdproc: lock the build of etcd %s: %w", t.version, err)
	}
	defer unlock()
	if _, err := os.Stat(t.bin); err == nil {
		return t.bin, nil // built by another process while we waited
	}
	if err := toolbuild.Build(ctx, t.src, t.bin, []string{"-modfile=" + t.modfile}, "."); err != nil {
		return "", fmt.Errorf("etcdproc: build etcd %s (or set %s): %w", t.release, EnvBinary, err)
	}
	return t.bin, nil
}

// target is where the binary of one version comes from and goes to.
type target struct {
	version, release string // "3.7", "3.7.3"
	src, modfile     string // tools/etcdserver and its go.mod for version
	bin              string // the binary's path in the cache
}

// locate finds the sources, pinned release and cache path of version's
// binary.
func locate(version string) (target, error) {
	if version == "" {
		version = Version()
	}
	if !slices.Contains(Versions, version) {
		return target{}, fmt.Errorf("etcdproc: etcd version %q is none of %v (set %s, or %s to a binary)", version, Versions, EnvVersion, EnvBinary)
	}
	src, err := sourceDir()
	if err != nil {
		return target{}, err
	}
	modfile := "go.mod"
	if version != DefaultVersion {
		modfile = "go.v" + version + ".mod"
	}
	release, err := pinnedRelease(filepath.Join(src, modfile))
	if err != nil {
		return target{}, err
	}
	key, err := sourceKey(src, modfile)
	if err != nil {
		return target{}, err
	}
	cache, err := toolbuild.CacheDir("etcd")
	if err != nil {
		return target{}, fmt.Errorf("etcdproc: %w", err)
	}
	return target{
		version: version, release: release, src: src, modfile: modfile,
		bin: filepath.Join(cache, "etcd-"+version+"-"+key),
	}, nil
}

// serverModule is the module whose version a tools/etcdserver modfile pins.
const serverModule = "go.etcd.io/etcd/server/v3"

// pinnedRelease reads the etcd server release a modfile requires, "3.7.3"
// for "require go.etcd.io/etcd/server/v3 v3.7.3".
func pinnedRelease(modfile string) (string, error) {
	b, err := os.ReadFile(modfile)
	if err != nil {
		return "", fmt.Errorf("etcdproc: %w", err)
	}
	if release := toolbuild.Pinned(b, serverModule); release != "" {
		return release, nil
	}
	return "", fmt.Errorf("etcdproc: %s requires no %s", modfile, serverModule)
}

// sourceDir returns the directory of tools/etcdserver in the checkout this
// package was built from.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("etcdproc: cannot locate the source of tools/etcdserver; set %s", EnvBinary)
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "tools", "etcdserver")
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
		return "", fmt.Errorf("etcdproc: no tools/etcdserver next to this package (%w); set %s to an etcd binary", err, EnvBinary)
	}
	return dir, nil
}

// sourceKey digests what the binary is built from.
func sourceKey(src, modfile string) (string, error) {
	h := sha256.New()
	h.Write([]byte(runtime.Version()))
	sum := strings.TrimSuffix(modfile, ".mod") + ".sum"
	for _, f := range []string{"main.go", modfile, sum} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("etcdproc: %w", err)
		}
		h.Write([]byte(f))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
