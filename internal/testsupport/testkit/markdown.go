package testkit

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// MarkdownFiles returns the Markdown files under root, sorted: every
// *.md file outside hidden directories, testdata and vendor.
func MarkdownFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

// CheckAllSnippets runs CheckSnippets on every Markdown file under root
// and returns how many snippets of pkg it checked in all.
func CheckAllSnippets(t testing.TB, root, pkg, dir string) int {
	t.Helper()
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		n += CheckSnippets(t, f, pkg, dir)
	}
	return n
}

// A Link is a relative link of a Markdown file: its target file (empty
// for the file itself) and #anchor (without the '#'), and its line.
type Link struct {
	Path, Anchor string
	Line         int
}

var (
	inlineLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLinkRE    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Links returns the relative links of a Markdown text, outside code
// blocks and code spans. Links with a scheme (https:, mailto:) are left
// out.
func Links(markdown string) []Link {
	var out []Link
	for i, line := range proseLines(markdown) {
		line = codeSpanRE.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLinkRE.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLinkRE.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, tgt := range targets {
			tgt = strings.Trim(tgt, "<>")
			if schemeRE.MatchString(tgt) {
				continue
			}
			path, anchor, _ := strings.Cut(tgt, "#")
			out = append(out, Link{Path: path, Anchor: anchor, Line: i + 1})
		}
	}
	return out
}

// proseLines returns the lines of a Markdown text with the lines of
// fenced code blocks blanked, so that line numbers stay.
func proseLines(markdown string) []string {
	lines := strings.Split(markdown, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// Anchors returns the #anchors GitHub gives a Markdown text: one per
// heading (see Slug; a repeated slug gets -1, -2, ...) and one per HTML
// <a id="..."> or <a name="...">.
func Anchors(markdown string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(markdown) {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		text, ok := heading(l)
		if !ok {
			continue
		}
		s := Slug(text)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// heading returns the text of an ATX heading line ("## Text").
func heading(line string) (string, bool) {
	t := strings.TrimLeft(line, "#")
	if n := len(line) - len(t); n == 0 || n > 6 || (t != "" && t[0] != ' ') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(t), "#")), true
}

// Slug is GitHub's anchor of a heading's text: lower case, letters,
// digits, '-' and '_' kept, spaces turned into '-', everything else
// dropped.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// CheckLinks fails t for every relative link of the Markdown files that
// names a file or directory that does not exist, or an #anchor that the
// Markdown file it names does not have. It returns how many links it
// checked.
func CheckLinks(t testing.TB, files ...string) int {
	t.Helper()
	n := 0
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range Links(string(text)) {
			n++
			if msg := checkLink(f, l, anchors); msg != "" {
				t.Errorf("%s:%d: %s", f, l.Line, msg)
			}
		}
	}
	return n
}

// checkLink returns what is wrong with link l of file f, or "". anchors
// caches the anchors of the files read.
func checkLink(f string, l Link, anchors map[string]map[string]bool) string {
	target := f
	if l.Path != "" {
		target = filepath.Join(filepath.Dir(f), filepath.FromSlash(l.Path))
		if _, err := os.Stat(target); err != nil {
			return fmt.Sprintf("link to %s: no such file or directory", l.Path)
		}
	}
	if l.Anchor == "" || !strings.HasSuffix(target, ".md") {
		return ""
	}
	a, ok := anchors[target]
	if !ok {
		text, err := os.ReadFile(target)
		if err != nil {
			return err.Error()
		}
		a = Anchors(string(text))
		anchors[target] = a
	}
	if !a[l.Anchor] {
		return fmt.Sprintf("link to %s#%s: %s has no such heading", l.Path, l.Anchor, target)
	}
	return ""
}

var fileMarkerRE = regexp.MustCompile(`^<!--\s*file\s+(\S+)\s*-->$`)

// CheckFileSnippets fails t for every code block of the Markdown file md
// marked with a line "<!-- file PATH -->" right before its fence that is
// not the whole text of the file PATH (relative to md's directory). It
// returns how many such blocks it checked.
func CheckFileSnippets(t testing.TB, md string) int {
	t.Helper()
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	n := 0
	for i, l := range lines {
		m := fileMarkerRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		n++
		block, ok := fencedBlock(lines, i+1)
		if !ok {
			t.Errorf("%s:%d: the marker of %s is not followed by a code block", md, i+1, m[1])
			continue
		}
		want, err := os.ReadFile(filepath.Join(filepath.Dir(md), filepath.FromSlash(m[1])))
		if err != nil {
			t.Errorf("%s:%d: %v", md, i+1, err)
			continue
		}
		if got := block + "\n"; got != string(want) {
			t.Errorf("%s:%d: the block differs from %s; copy the file there:\n%s", md, i+1, m[1], firstDiff(got, string(want)))
		}
	}
	return n
}

// fencedBlock returns the text of the fenced code block that opens at
// lines[i], without its fences.
func fencedBlock(lines []string, i int) (string, bool) {
	if i >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
		return "", false
	}
	for j := i + 1; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "```" {
			return strings.Join(lines[i+1:j], "\n"), true
		}
	}
	return "", false
}
