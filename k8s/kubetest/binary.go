package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/toolbuild"
)

// Environment variables and facts about the binaries the harness runs.
const (
	// Version is the kube-apiserver version that tools/kubeapiserver pins
	// and Binary builds.
	Version = "v1.36.3"
	// EtcdVersion is the etcd server version the harness runs the API
	// server on (tools/etcdserver's go.v3.6.mod).
	EtcdVersion = "3.6"
	// EnvBinary names a kube-apiserver binary to run instead of the one
	// Binary builds.
	EnvBinary = "FENCEKIT_KUBE_APISERVER_BIN"
	// EnvEtcdBinary names an etcd binary to run instead of the one
	// tools/etcdserver builds (the variable package etcdproc reads).
	EnvEtcdBinary = etcdproc.EnvBinary
	// EnvRequire, set to "1", makes Start fail instead of skip a test
	// when the binaries have not been built. CI sets it.
	EnvRequire = "FENCEKIT_REQUIRE_KUBE"
	// BuildCommand builds both binaries and prints the directory that
	// holds them (see Assets); run it from the k8s module. A cold build
	// takes about 10 minutes on 2 cores.
	BuildCommand = "go run ./cmd/kubetest-assets"
)

// ErrNotBuilt reports that a binary the harness needs has not been built:
// run BuildCommand in the k8s module, or set EnvBinary and EnvEtcdBinary.
var ErrNotBuilt = errors.New("kubetest: binaries not built (run `" + BuildCommand + "` in the k8s module)")

// ldflags stamps the version that kube-apiserver reports (it would say
// v0.0.0-master) and strips the symbol table.
const ldflags = "-s -w" +
	" -X k8s.io/component-base/version.gitVersion=" + Version +
	" -X k8s.io/component-base/version.gitMajor=1" +
	" -X k8s.io/component-base/version.gitMinor=36"

// Binary returns the path of a kube-apiserver binary: EnvBinary's value
// when set, otherwise the one built from tools/kubeapiserver into the user
// cache directory (fencekit/kube-apiserver-<Version>-<key>, the key a
// digest of the tool module's go.mod and go.sum, the build flags and the
// Go version). It builds it when it is not there, which takes minutes;
// concurrent callers, in this process or others, wait for one build. ctx
// bounds the build. Tests call Lookup instead.
func Binary(ctx context.Context) (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		return bin, nil
	}
	src, bin, err := binaryPath()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	unlock, err := toolbuild.Lock(bin + ".lock")
	if err != nil {
		return "", fmt.Errorf("kubetest: lock the build of kube-apiserver: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another process while we waited
	}
	if err := toolbuild.Build(ctx, src, bin, []string{"-ldflags", ldflags}, "k8s.io/kubernetes/cmd/kube-apiserver"); err != nil {
		return "", fmt.Errorf("kubetest: build kube-apiserver %s (or set %s): %w", Version, EnvBinary, err)
	}
	return bin, nil
}

// Lookup returns the kube-apiserver and etcd binaries that Binary and
// etcdproc would return, without building them: an error matching
// ErrNotBuilt names the one missing.
func Lookup() (apiserver, etcd string, err error) {
	apiserver = os.Getenv(EnvBinary)
	if apiserver == "" {
		_, apiserver, err = binaryPath()
		if err != nil {
			return "", "", err
		}
		if _, err := os.Stat(apiserver); err != nil {
			return "", "", fmt.Errorf("%w: no %s", ErrNotBuilt, apiserver)
		}
	}
	etcd, err = etcdproc.Built(EtcdVersion)
	if errors.Is(err, etcdproc.ErrNotBuilt) {
		return "", "", fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return apiserver, etcd, err
}

// Assets builds both binaries when needed (see Binary) and returns a
// directory holding them as kube-apiserver and etcd: the layout that
// controller-runtime's envtest reads from KUBEBUILDER_ASSETS (or
// envtest.Environment's BinaryAssetsDirectory).
func Assets(ctx context.Context) (string, error) {
	apiserver, err := Binary(ctx)
	if err != nil {
		return "", err
	}
	etcd, err := etcdproc.Binary(ctx, EtcdVersion)
	if err != nil {
		return "", err
	}
	return assetsDir(apiserver, etcd)
}

// LookupAssets is Assets without building: it fails with an error
// matching ErrNotBuilt when a binary is missing.
func LookupAssets() (string, error) {
	apiserver, etcd, err := Lookup()
	if err != nil {
		return "", err
	}
	return assetsDir(apiserver, etcd)
}

// assetsDir returns (making it) a directory whose kube-apiserver and etcd
// are symbolic links to apiserver and etcd.
func assetsDir(apiserver, etcd string) (string, error) {
	h := sha256.Sum256([]byte(apiserver + "\x00" + etcd))
	cache, err := toolbuild.CacheDir("kube")
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	dir := filepath.Join(cache, "assets-"+hex.EncodeToString(h[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	for name, target := range map[string]string{"kube-apiserver": apiserver, "etcd": etcd} {
		link := filepath.Join(dir, name)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		tmp := fmt.Sprintf("%s.tmp%d", link, os.Getpid())
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return "", fmt.Errorf("kubetest: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			return "", fmt.Errorf("kubetest: %w", err)
		}
	}
	return dir, nil
}

// binaryPath returns the directory of tools/kubeapiserver and the cache
// path of the binary built from it.
func binaryPath() (src, bin string, err error) {
	src, err = sourceDir()
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	h.Write([]byte(runtime.Version() + "\x00" + ldflags))
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", "", fmt.Errorf("kubetest: %w", err)
		}
		h.Write([]byte(f))
		h.Write(b)
	}
	cache, err := toolbuild.CacheDir("kube")
	if err != nil {
		return "", "", fmt.Errorf("kubetest: %w", err)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	return src, filepath.Join(cache, "kube-apiserver-"+Version+"-"+key), nil
}

// sourceDir returns the directory of tools/kubeapiserver in the checkout
// this package was built from. A module download of k8s has none: set
// EnvBinary then.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("kubetest: cannot locate tools/kubeapiserver; set %s", EnvBinary)
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "tools", "kubeapiserver")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("kubetest: no tools/kubeapiserver next to this package (%w); set %s to a kube-apiserver binary", err, EnvBinary)
	}
	return filepath.Clean(dir), nil
}
