// Package docscheck holds no code: its tests check the repository's
// Markdown as a whole. Every relative link and #anchor of every Markdown
// file must resolve, the README stays a front door of at most 300 lines,
// and the README's first program is the file examples/minimal/main.go as
// it is.
//
// Snippets copied from a package's Example functions are checked by that
// package's own TestReadmeSnippets (testkit.CheckAllSnippets), which reads
// every Markdown file of the repository.
package docscheck
