package testkit

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A Snippet is a Go code block of a Markdown file that names the Example
// it is copied from, with a marker line right before its fence:
//
//	<!-- example guard.Example -->
//	```go
//	...the Example's body, one tab less indented...
//	```
//
// A marker "excerpt" instead of "example" makes the block an excerpt of
// the body (see CheckDocSnippets for what that allows).
type Snippet struct {
	// Pkg and Example name the Example function: package name and
	// function name.
	Pkg, Example string
	// Excerpt is true for an "excerpt" marker.
	Excerpt bool
	// Code is the block's text, without the fences.
	Code string
	// Line is the marker's line number, from 1.
	Line int
}

var markerRE = regexp.MustCompile(`^<!--\s*(example|excerpt)\s+([A-Za-z0-9_]+)\.(Example[A-Za-z0-9_]*)\s*-->\s*$`)

// Snippets returns the marked snippets of a Markdown text. A marker not
// followed by a ```go block is an error.
func Snippets(markdown string) ([]Snippet, error) {
	lines := strings.Split(markdown, "\n")
	var out []Snippet
	for i := 0; i < len(lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```go" {
			return nil, fmt.Errorf("line %d: marker for %s.%s is not followed by a ```go block", i+1, m[2], m[3])
		}
		end := -1
		for j := i + 2; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("line %d: the ```go block of %s.%s does not end", i+1, m[2], m[3])
		}
		out = append(out, Snippet{Pkg: m[2], Example: m[3], Excerpt: m[1] == "excerpt",
			Code: strings.Join(lines[i+2:end], "\n"), Line: i + 1})
		i = end
	}
	return out, nil
}

// ExampleBodies returns the bodies of the Example functions in the
// _test.go files of dir, by function name: the text between the braces,
// each line one tab less indented, without the first and last newline.
func ExampleBodies(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			from := fset.Position(fn.Body.Lbrace).Offset + 1
			to := fset.Position(fn.Body.Rbrace).Offset
			body := strings.Trim(string(src[from:to]), "\n")
			lines := strings.Split(body, "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, "\t")
			}
			out[fn.Name.Name] = strings.Join(lines, "\n")
		}
	}
	return out, nil
}

// CheckSnippets fails t for every snippet of package pkg in the Markdown
// file md that differs from the body of the Example it names, found in
// the _test.go files of dir, or for an excerpt, is not an excerpt of it.
// It returns how many snippets it checked.
func CheckSnippets(t testing.TB, md, pkg, dir string) int {
	t.Helper()
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	snips, err := Snippets(string(text))
	if err != nil {
		t.Fatalf("%s: %v", md, err)
	}
	bodies, err := ExampleBodies(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range snips {
		if s.Pkg != pkg {
			continue
		}
		n++
		body, ok := bodies[s.Example]
		if !ok {
			t.Errorf("%s:%d: no function %s in %s/*_test.go", md, s.Line, s.Example, dir)
			continue
		}
		if s.Excerpt {
			if !excerpt(s.Code, body) {
				t.Errorf("%s:%d: the excerpt is not one of %s.%s: its lines must appear there in order (\"// ...\" skips lines)",
					md, s.Line, pkg, s.Example)
			}
			continue
		}
		if s.Code != body {
			t.Errorf("%s:%d: the snippet differs from %s.%s; copy the function's body there:\n%s",
				md, s.Line, pkg, s.Example, firstDiff(s.Code, body))
		}
	}
	return n
}

// DocBlocks returns the code blocks (indented lines) of the package
// comment in the Go file name, without their indentation.
func DocBlocks(name string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return nil, err
	}
	if f.Doc == nil {
		return nil, nil
	}
	var blocks []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, l := range strings.Split(f.Doc.Text(), "\n") {
		if c, ok := strings.CutPrefix(l, "\t"); ok {
			cur = append(cur, c)
			continue
		}
		flush()
	}
	flush()
	return blocks, nil
}

// CheckDocSnippets fails t for every code block of the package comment
// in dir/doc.go that is not an excerpt of an Example function in dir's
// _test.go files: its lines, compared without leading and trailing
// space, must appear as consecutive lines of one Example's body, except
// that a line "..." in the block stands for any number of lines. It
// returns how many blocks it checked.
func CheckDocSnippets(t testing.TB, dir string) int {
	t.Helper()
	blocks, err := DocBlocks(filepath.Join(dir, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := ExampleBodies(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		found := false
		for _, body := range bodies {
			if excerpt(b, body) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s/doc.go: this code block is not an excerpt of any Example in %s:\n%s", dir, dir, b)
		}
	}
	return len(blocks)
}

// excerpt reports whether block's lines appear in body in order, each run
// between "..." lines consecutively.
func excerpt(block, body string) bool {
	trim := func(s string) []string {
		ls := strings.Split(s, "\n")
		for i := range ls {
			ls[i] = strings.TrimSpace(ls[i])
		}
		return ls
	}
	bl, bd := trim(block), trim(body)
	var runs [][]string
	var cur []string
	for _, l := range bl {
		if l == "..." || l == "// ..." {
			runs = append(runs, cur)
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	runs = append(runs, cur)
	pos := 0
	for _, run := range runs {
		if len(run) == 0 {
			continue
		}
		i := indexRun(bd[pos:], run)
		if i < 0 {
			return false
		}
		pos += i + len(run)
	}
	return true
}

func indexRun(lines, run []string) int {
outer:
	for i := 0; i+len(run) <= len(lines); i++ {
		for j := range run {
			if lines[i+j] != run[j] {
				continue outer
			}
		}
		return i
	}
	return -1
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d of the snippet: %q\nline %d of the Example:  %q", i+1, gl, i+1, wl)
		}
	}
	return "(no difference)"
}
