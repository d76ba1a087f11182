// Package toolbuild builds the servers fencekit's tests run (etcd of each
// version, versitygw, kube-apiserver) from Go modules, once, into a cache
// directory, and is shared by internal/etcdproc, internal/s3proc and
// k8s/kubetest: the cache's place, the file lock that makes concurrent
// builders wait for one build, the go build that writes through a
// temporary file renamed into place, and the reading of a tool module's
// pinned release; and the main of the commands that build them before
// the tests (Main, Ensure).
package toolbuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

// CacheDir returns (making it) the directory under the user cache
// directory where built binaries of sub are kept: ~/.cache/fencekit/sub on
// Linux ("" for ~/.cache/fencekit itself), or under the temporary
// directory when there is no user cache directory.
func CacheDir(sub string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "fencekit", sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache dir: %w", err)
	}
	return dir, nil
}

// Build runs `go build -trimpath flags... -o bin pkg` in dir, with the
// workspace off, the module graph read-only and cgo off, through a
// temporary file renamed into place, so that bin is complete whenever it
// exists. ctx bounds the build.
func Build(ctx context.Context, dir, bin string, flags []string, pkg string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil && os.Getenv("GOROOT") != "" {
		goCmd, err = filepath.Join(os.Getenv("GOROOT"), "bin", "go"), nil
	}
	if err != nil {
		return fmt.Errorf("no go command to build with: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	defer os.Remove(tmp)
	args := append(append([]string{"build", "-trimpath"}, flags...), "-o", tmp, pkg)
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, bin)
}

// Pinned returns the version, without its "v", at which the go.mod text
// mod requires module: "3.7.3" for "require go.etcd.io/etcd/server/v3
// v3.7.3", in a require block or on a line of its own; "" if it does not.
func Pinned(mod []byte, module string) string {
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return strings.TrimPrefix(f[1], "v")
		}
	}
	return ""
}

// Tool is a server that a build command builds before the tests.
type Tool struct {
	// What names the tool and its release in messages, such as "etcd
	// 3.7.3 server"; it is called only when a build is needed.
	What func() (string, error)
	// Built returns the path of the binary when it is built, or an error
	// that matches NotBuilt when it is not.
	Built    func() (string, error)
	NotBuilt error
	// Build builds the binary and returns its path; Timeout bounds it.
	Build   func(ctx context.Context) (string, error)
	Timeout time.Duration
}

// Ensure builds t unless it is built. A build prints "building <what>,
// first run only…" to w first and "built <what> in <duration>: <path>"
// after; a binary already built prints nothing.
func Ensure(ctx context.Context, w io.Writer, t Tool) error {
	if _, err := t.Built(); err == nil {
		return nil
	} else if !errors.Is(err, t.NotBuilt) {
		return err
	}
	what, err := t.What()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "building %s, first run only…\n", what)
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	bin, err := t.Build(bctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "built %s in %s: %s\n", what, time.Since(start).Round(time.Second), bin)
	return nil
}

// Main is a build command's main: it runs run with a context that an
// interrupt cancels (and that ends after timeout, when it is not 0),
// progress going to stderr, and exits 1 after printing the error, after
// prefix when it is not empty, when run fails.
func Main(prefix string, timeout time.Duration, run func(ctx context.Context, w io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	cancel := context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	err := run(ctx, os.Stderr)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+err.Error())
		os.Exit(1)
	}
}
