// Package modtest holds the checks that the guard modules of their own
// (redisguard, objguard) run alike: which packages their package links,
// that the core module does not require their drivers, and that their
// Examples, which need a server, print what they should.
package modtest

import (
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Deps checks what the package in the current directory, named pkg,
// links (go list -deps): none for which forbidden reports true, each of
// want. It skips with -short.
func Deps(t *testing.T, pkg string, forbidden func(dep string) bool, want ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if forbidden(d) {
			t.Errorf("package %s depends on %s", pkg, d)
		}
	}
	for _, w := range want {
		if !slices.Contains(deps, w) {
			t.Errorf("package %s does not depend on %s", pkg, w)
		}
	}
	t.Logf("package %s has %d dependencies", pkg, len(deps))
}

// CoreModLacks checks that the core module's go.mod (in the parent
// directory) mentions none of needles; what names them in the error.
func CoreModLacks(t *testing.T, what string, needles ...string) {
	t.Helper()
	core, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range needles {
		if strings.Contains(string(core), n) {
			t.Errorf("the core module's go.mod requires %s", what)
			return
		}
	}
}

// Example is an Example function and what it must print.
type Example struct {
	Name string
	Run  func()
	Want string
}

// RunExamples runs each Example and checks what it prints, as `// Output:`
// would.
func RunExamples(t *testing.T, examples ...Example) {
	t.Helper()
	for _, e := range examples {
		if got := Stdout(t, e.Run); got != e.Want {
			t.Errorf("%s printed\n%s\nwant\n%s", e.Name, got, e.Want)
		}
	}
}

// Stdout returns what f prints to os.Stdout.
func Stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = orig }()
	f()
	w.Close()
	return <-done
}
