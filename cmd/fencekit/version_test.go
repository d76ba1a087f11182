package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersion: --version prints one line naming the version and the
// commit, and exits 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		var stdout, stderr bytes.Buffer
		code := Main([]string{arg}, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		require.Equal(t, ExitOK, code, stderr.String())
		out := stdout.String()
		assert.Regexp(t, `^fencekit \S+ \(commit [^)]+\) go\S+ \S+/\S+\n$`, out)
	}
}

// TestVersionLinked: the values a release build links in win over the
// build information.
func TestVersionLinked(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.8.7", "0123abc"
	assert.True(t, strings.HasPrefix(versionString(), "fencekit v9.8.7 (commit 0123abc) "), versionString())
}

// TestFromBuildInfo: the version and commit taken from the build
// information of each kind of build.
func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name         string
		info         debug.BuildInfo
		wantV, wantC string
	}{
		{"go install @version", debug.BuildInfo{Main: debug.Module{Version: "v0.1.0", Sum: "h1:abc="}}, "v0.1.0", "unknown, module h1:abc="},
		{"checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ae8b48c"}, {Key: "vcs.modified", Value: "false"}}}, "(devel)", "ae8b48c"},
		{"dirty checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ae8b48c"}, {Key: "vcs.modified", Value: "true"}}}, "(devel)", "ae8b48c-dirty"},
		{"no VCS", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, c := fromBuildInfo(&tc.info, "", "")
			assert.Equal(t, tc.wantV, v)
			assert.Equal(t, tc.wantC, c)
		})
	}
}

// TestHelpFlagsFirst: each command's --help starts with its usage line
// and its flags; the description follows them.
func TestHelpFlagsFirst(t *testing.T) {
	for _, c := range commands {
		var stdout bytes.Buffer
		require.Equal(t, ExitOK, Main([]string{c.name, "--help"}, &Env{Stdout: &stdout, Getenv: func(string) string { return "" }}))
		lines := strings.Split(stdout.String(), "\n")
		require.Greater(t, len(lines), 3, c.name)
		assert.Equal(t, "Usage: fencekit "+c.synopsis, lines[0], c.name)
		assert.Equal(t, "Flags:", lines[2], c.name)
		assert.True(t, strings.HasPrefix(lines[3], "  -"), "%s: %q", c.name, lines[3])
	}
}
