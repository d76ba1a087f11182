package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time by release builds
// (.goreleaser.yaml: -X main.version=... -X main.commit=...). When they
// are empty, versionString takes them from the build information: the
// module version "go install ...@vX.Y.Z" builds, and the VCS revision a
// build in a checkout stamps.
var (
	version string
	commit  string
)

// versionString is the line "fencekit --version" prints: the version,
// the commit (or, when the build knows none, the module's checksum), and
// the Go version and platform.
func versionString() string {
	v, c := version, commit
	if info, ok := debug.ReadBuildInfo(); ok {
		v, c = fromBuildInfo(info, v, c)
	}
	if v == "" {
		v = "(devel)"
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("fencekit %s (commit %s) %s %s/%s", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// fromBuildInfo fills v and c, where empty, from info.
func fromBuildInfo(info *debug.BuildInfo, v, c string) (string, string) {
	if v == "" {
		v = info.Main.Version
	}
	if c != "" {
		return v, c
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			c = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case c != "" && dirty:
		c += "-dirty"
	case c == "" && info.Main.Sum != "":
		c = "unknown, module " + info.Main.Sum // built from a module zip
	}
	return v, c
}
