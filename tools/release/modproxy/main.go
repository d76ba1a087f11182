// Command modproxy writes every released module of the repository, as it
// is at one commit, into a file-system module proxy (GOPROXY=file://DIR),
// at one version: for each go.mod in the commit outside tools/ and
// testdata/, DIR/<module>/@v/VERSION.{info,mod,zip} and the version in
// DIR/<module>/@v/list. scripts/release.sh and scripts/modcheck.sh run it.
//
//	go run ./modproxy -repo ../.. -commit C -version v0.1.0 -out DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the repository's work tree")
	commit := flag.String("commit", "HEAD", "the commit to publish")
	version := flag.String("version", "", "the version to publish it as (vMAJOR.MINOR.PATCH)")
	out := flag.String("out", "", "the proxy directory (created if missing)")
	flag.Parse()
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version || *out == "" {
		log.Fatal("modproxy: need -version vX.Y.Z and -out DIR")
	}
	if err := run(*repo, *commit, *version, *out); err != nil {
		log.Fatal("modproxy: ", err)
	}
}

func run(repo, commit, version, out string) error {
	tree, err := os.MkdirTemp("", "fencekit-modproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	// The commit's files, as git archive writes them (what a tag holds).
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, tree)
	archive.Stderr = os.Stderr
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", commit, err)
	}
	when, err := commitTime(repo, commit)
	if err != nil {
		return err
	}
	dirs, err := moduleDirs(tree)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		p, err := publish(filepath.Join(tree, dir), version, when, out)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		fmt.Printf("%s@%s\n", p, version)
	}
	return nil
}

func commitTime(repo, commit string) (time.Time, error) {
	b, err := exec.Command("git", "-C", repo, "show", "-s", "--format=%ct", commit).Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git show %s: %w", commit, err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Unix(sec, 0).UTC(), err
}

// moduleDirs returns the directories of the released modules, relative to
// tree: every go.mod outside tools/ and testdata/.
func moduleDirs(tree string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, p)
		if d.IsDir() && (rel == "tools" || d.Name() == "testdata" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dirs = append(dirs, filepath.Dir(rel))
		}
		return nil
	})
	slices.Sort(dirs)
	if len(dirs) == 0 && err == nil {
		err = errors.New("no go.mod in the commit")
	}
	return dirs, err
}

// publish writes the module in dir at version into the proxy out and
// returns its path.
func publish(dir, version string, when time.Time, out string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	modPath := modfile.ModulePath(gomod)
	if modPath == "" {
		return "", errors.New("go.mod names no module")
	}
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	var z bytes.Buffer
	if err := zip.CreateFromDir(&z, module.Version{Path: modPath, Version: version}, dir); err != nil {
		return "", err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	base := path.Join(vdir, version)
	for name, b := range map[string][]byte{base + ".info": info, base + ".mod": gomod, base + ".zip": z.Bytes()} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return "", err
		}
	}
	return modPath, addToList(filepath.Join(vdir, "list"), version)
}

func addToList(name, version string) error {
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(b))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
