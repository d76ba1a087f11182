package toolbuild_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencekit/fencekit/internal/toolbuild"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPinned(t *testing.T) {
	mod := []byte("module x\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 v3.5.36\n\nrequire (\n\tgithub.com/versity/versitygw v1.8.0\n\tgo.etcd.io/bbolt v1.3.12 // indirect\n)\n")
	for module, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":    "3.5.36",
		"github.com/versity/versitygw": "1.8.0",
		"go.etcd.io/etcd/client/v3":    "",
	} {
		if got := toolbuild.Pinned(mod, module); got != want {
			t.Errorf("Pinned(%s) = %q, want %q", module, got, want)
		}
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	dir, err := toolbuild.CacheDir("etcd")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(dir) != "etcd" || filepath.Base(filepath.Dir(dir)) != "fencekit" {
		t.Errorf("CacheDir(etcd) = %s, want …/fencekit/etcd", dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("CacheDir did not make %s: %v", dir, err)
	}
}
