package testkit_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Redis: redisguard":          "redis-redisguard",
		"What it does not guarantee": "what-it-does-not-guarantee",
		"Crash takeover, the TTL to choose, and the cost of a holder's death": "crash-takeover-the-ttl-to-choose-and-the-cost-of-a-holders-death",
		"Refusals: one error, one outcome":                                    "refusals-one-error-one-outcome",
		"`fencekit run` and snake_case":                                       "fencekit-run-and-snake_case",
		"Semaphores, read/write locks":                                        "semaphores-readwrite-locks",
	} {
		if got := testkit.Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchorsAndLinks(t *testing.T) {
	md := "# Title\n\n## Part\n\n## Part\n\n<a id=\"custom\"></a>\n\n```sh\n# not a heading [x](nowhere.md)\n```\n" +
		"See [a](#part-1), [b](other.md#x \"title\"), `[c](code.md)`, [d](https://example.com/#y).\n[ref]: dir/#z\n"
	a := testkit.Anchors(md)
	for _, want := range []string{"title", "part", "part-1", "custom"} {
		if !a[want] {
			t.Errorf("anchors %v lack %q", a, want)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line of a code block counted as a heading")
	}
	links := testkit.Links(md)
	want := []testkit.Link{{Anchor: "part-1", Line: 12}, {Path: "other.md", Anchor: "x", Line: 12}, {Path: "dir/", Anchor: "z", Line: 13}}
	if len(links) != len(want) {
		t.Fatalf("Links = %+v, want %+v", links, want)
	}
	for i := range want {
		if links[i] != want[i] {
			t.Errorf("link %d = %+v, want %+v", i, links[i], want[i])
		}
	}
}

func TestCheckLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("docs/b.md", "# B\n\n## Has it\n")
	good := write("a.md", "# A\n\n[b](docs/b.md#has-it), [self](#a), [dir](docs)\n")
	if n := testkit.CheckLinks(t, good); n != 3 {
		t.Errorf("checked %d links, want 3", n)
	}
	files, err := testkit.MarkdownFiles(dir)
	if err != nil || len(files) != 2 {
		t.Errorf("MarkdownFiles = %v, %v; want a.md and docs/b.md", files, err)
	}
	for _, bad := range []string{"[b](docs/c.md)", "[b](docs/b.md#missing)", "[self](#nope)"} {
		rec := &recorder{TB: t}
		testkit.CheckLinks(rec, write("bad.md", "# Bad\n\n"+bad+"\n"))
		if !rec.failed {
			t.Errorf("broken link %s passed", bad)
		}
	}
}

func TestCheckFileSnippets(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "prog.go"), []byte("package main\n\nfunc main() {}\n"), 0o600)
	md := filepath.Join(dir, "r.md")
	os.WriteFile(md, []byte("# R\n\n<!-- file prog.go -->\n```go\npackage main\n\nfunc main() {}\n```\n"), 0o600)
	if n := testkit.CheckFileSnippets(t, md); n != 1 {
		t.Errorf("checked %d file blocks, want 1", n)
	}
	os.WriteFile(md, []byte("<!-- file prog.go -->\n```go\npackage main\n```\n"), 0o600)
	rec := &recorder{TB: t}
	testkit.CheckFileSnippets(rec, md)
	if !rec.failed {
		t.Error("a block that differs from its file passed")
	}
}
