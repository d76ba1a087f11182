package etcdproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

// Binary returns the path of an etcd server binary: EnvBinary's value when
// set, otherwise the one tools/etcdserver builds for version (a minor
// version, such as "3.6"; "" means Version()). It builds it on first use,
// with the go command, into a cache directory keyed by version, sources
// and Go version; concurrent callers, in this process or others, wait for
// one build. ctx bounds the build.
func Binary(ctx context.Context, version string) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	b, err := binaryPath(version)
	if err != nil {
		return "", err
	}
	version, bin := b.version, b.bin
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	unlock, err := lockFile(filepath.Join(filepath.Dir(bin), "build-"+version+".lock"))
	if err != nil {
		return "", fmt.Errorf("etcdproc: lock the build of etcd %s: %w", version, err)
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another process while we waited
	}
	if err := build(ctx, b.src, b.modfile, bin); err != nil {
		return "", fmt.Errorf("etcdproc: build etcd %s (or set %s): %w", version, EnvBinary, err)
	}
	return bin, nil
}

// ErrNotBuilt reports that Lookup found no built binary.
var ErrNotBuilt = errors.New("etcdproc: etcd binary not built")

// Lookup returns what Binary would return, without building: EnvBinary's
// value when set, otherwise the cached binary of version ("" means
// Version()), or an error matching ErrNotBuilt when it has not been built
// yet. Tests call it to skip rather than spend their time on a build.
func Lookup(version string) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	b, err := binaryPath(version)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(b.bin); err != nil {
		return "", fmt.Errorf("%w: %s", ErrNotBuilt, b.bin)
	}
	return b.bin, nil
}

// binaryBuild is where the binary of one version comes from and goes.
type binaryBuild struct {
	version, src, modfile, bin string
}

// binaryPath returns the source directory, the go.mod file and the cache
// path of the binary of version ("" means Version()).
func binaryPath(version string) (binaryBuild, error) {
	if version == "" {
		version = Version()
	}
	if !slices.Contains(Versions, version) {
		return binaryBuild{}, fmt.Errorf("etcdproc: etcd version %q is none of %v (set %s, or %s to a binary)", version, Versions, EnvVersion, EnvBinary)
	}
	src, err := sourceDir()
	if err != nil {
		return binaryBuild{}, err
	}
	modfile := "go.mod"
	if version != DefaultVersion {
		modfile = "go.v" + version + ".mod"
	}
	key, err := sourceKey(src, modfile)
	if err != nil {
		return binaryBuild{}, err
	}
	cache, err := cacheDir()
	if err != nil {
		return binaryBuild{}, err
	}
	return binaryBuild{version, src, modfile, filepath.Join(cache, "etcd-"+version+"-"+key)}, nil
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

// cacheDir returns (making it) the directory that keeps built binaries.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "fencekit", "etcd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("etcdproc: cache dir: %w", err)
	}
	return dir, nil
}

// build builds tools/etcdserver with modfile to bin, through a temporary
// file renamed into place, so that bin is complete whenever it exists.
func build(ctx context.Context, src, modfile, bin string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil && os.Getenv("GOROOT") != "" {
		goCmd, err = filepath.Join(os.Getenv("GOROOT"), "bin", "go"), nil
	}
	if err != nil {
		return fmt.Errorf("no go command to build with: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	defer os.Remove(tmp)
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-modfile="+modfile, "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return os.Rename(tmp, bin)
}
