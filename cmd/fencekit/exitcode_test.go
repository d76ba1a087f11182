package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exitCodes is the exit code of every error sentinel of package lease, as
// fencekit reports a failure matching it. TestExitCodeEverySentinel fails
// when lease gains a sentinel this table does not name, so that no new
// error falls into 69 ("connection error") by default.
var exitCodes = map[string]struct {
	err  error
	code int
}{
	"ErrInvalidName":      {lease.ErrInvalidName, ExitUsage},
	"ErrInvalidSet":       {lease.ErrInvalidSet, ExitUsage},
	"ErrInvalidOption":    {lease.ErrInvalidOption, ExitUsage},
	"ErrMaxHold":          {lease.ErrMaxHold, ExitLost},
	"ErrReleaseRequested": {lease.ErrReleaseRequested, ExitSoftware},
	"ErrTTLTooShort":      {lease.ErrTTLTooShort, ExitUsage},
	"ErrMismatch":         {lease.ErrMismatch, ExitUsage},
	"ErrPermissionDenied": {lease.ErrPermissionDenied, ExitConn},
	"ErrOutcomeUnknown":   {lease.ErrOutcomeUnknown, ExitConn},
	"ErrLeftBehind":       {lease.ErrLeftBehind, ExitConn},
	"ErrRetryable":        {lease.ErrRetryable, ExitConn},
	"ErrHeld":             {lease.ErrHeld, ExitNotAcquired},
	"ErrLost":             {lease.ErrLost, ExitLost},
	"ErrNotOwner":         {lease.ErrNotOwner, ExitLost},
	"ErrNotFound":         {lease.ErrNotFound, ExitLost},
	"ErrKeyDeleted":       {lease.ErrKeyDeleted, ExitLost},
	"ErrKeyOverwritten":   {lease.ErrKeyOverwritten, ExitLost},
	"ErrSessionExpired":   {lease.ErrSessionExpired, ExitLost},
	"ErrRevokedEarly":     {lease.ErrRevokedEarly, ExitLost},
	"ErrDeadline":         {lease.ErrDeadline, ExitLost},
	"ErrReleased":         {lease.ErrReleased, ExitSoftware},
	"ErrTransferred":      {lease.ErrTransferred, ExitSoftware},
	"ErrNotCandidate":     {lease.ErrNotCandidate, ExitRefused},
	"ErrClosed":           {lease.ErrClosed, ExitSoftware},
	"ErrEtcdClosed":       {lease.ErrEtcdClosed, ExitSoftware},
	"ErrNoLeader":         {lease.ErrNoLeader, ExitSoftware},
	"ErrServerTooOld":     {lease.ErrServerTooOld, ExitServerTooOld},
}

// TestExitCodeEverySentinel: every exported error variable of package
// lease, found by parsing its source, has a row in exitCodes, and
// exitCode maps it (wrapped, as the lease package returns it) to that row's
// code.
func TestExitCodeEverySentinel(t *testing.T) {
	names := leaseSentinels(t)
	require.NotEmpty(t, names)
	for _, name := range names {
		row, ok := exitCodes[name]
		if !assert.True(t, ok, "lease.%s has no row in exitCodes: decide its exit code", name) {
			continue
		}
		wrapped := fmt.Errorf("lease: acquire %q: %w", "x", row.err)
		assert.Equal(t, row.code, exitCode(wrapped), "lease.%s (%v)", name, row.err)
	}
	for name := range exitCodes {
		assert.Contains(t, names, name, "exitCodes names lease.%s, which lease no longer has", name)
	}
}

// TestExitCodeCombinations: an error matching several sentinels gets the
// most specific code: a lost lease that is retryable (Do) is lost, a
// mismatch is a usage error however it is wrapped; anything else,
// lease's or etcd's, is a connection error.
func TestExitCodeCombinations(t *testing.T) {
	lost := &lease.LostError{Lock: "x", Cause: lease.ErrSessionExpired}
	for _, c := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: %w", lease.ErrRetryable, lost), ExitLost},
		{fmt.Errorf("%w: %w", lease.ErrRetryable, lease.ErrOutcomeUnknown), ExitConn},
		{lost, ExitLost},
		{&lease.NotHolderError{}, ExitRefused},
		{fmt.Errorf("etcd at x: context deadline exceeded"), ExitConn},
	} {
		assert.Equal(t, c.code, exitCode(c.err), "%v", c.err)
	}
}

// leaseSentinels returns the names of the exported package-level error
// variables (Err...) of package lease, parsed from its non-test sources.
func leaseSentinels(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "lease", "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}
