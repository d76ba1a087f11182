package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMinimal runs the program against an embedded etcd and checks that
// the guard admitted A and B and refused A's late write as stale.
func TestMinimal(t *testing.T) {
	cluster := etcdtest.Start(t)
	t.Setenv("ETCDCTL_ENDPOINTS", strings.Join(cluster.Endpoints(), ","))
	out := captureStdout(t, main)
	want := []string{"A writes: <nil>", "B writes: <nil>", "A, late, refused as stale: true"}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s\nwant %d lines starting %q", out, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
}

// captureStdout returns what f writes to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = stdout }()
	f()
	w.Close()
	return <-done
}
