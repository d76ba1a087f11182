package serverversion

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// floor is lease.MinServerVersion.
const floor = "3.5.0"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Versions inside the floor with known lock-relevant bugs are logged at
// Warn, naming the etcd issues and the release that fixes them all; older
// ones are refused; newer ones pass silently.
func TestJudgeVersion(t *testing.T) {
	for _, tc := range []struct {
		version, issues, fixedIn string
		tooOld                   bool
	}{
		{version: "3.4.23", tooOld: true},
		{version: "2.3.8", tooOld: true},
		{version: "3.5.0", issues: "etcd-io/etcd#13766 etcd-io/etcd#17529 etcd-io/etcd#17425 etcd-io/etcd#19179 etcd-io/etcd#20616 etcd-io/etcd#20418", fixedIn: "3.5.28"},
		{version: "3.5.12", issues: "etcd-io/etcd#17529 etcd-io/etcd#17425 etcd-io/etcd#19179 etcd-io/etcd#20616 etcd-io/etcd#20418", fixedIn: "3.5.28"},
		{version: "3.5.21", issues: "etcd-io/etcd#20616 etcd-io/etcd#20418", fixedIn: "3.5.28"},
		{version: "3.5.28"},
		{version: "3.5.36"},
		{version: "3.6.4", issues: "etcd-io/etcd#20615 etcd-io/etcd#20418", fixedIn: "3.6.9"},
		{version: "3.6.8", issues: "etcd-io/etcd#20418", fixedIn: "3.6.9"},
		{version: "3.6.17"},
		{version: "3.7.0-rc.1"},
		{version: "3.7.3"},
		{version: "4.0.0"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			const ep = "http://127.0.0.1:2379"
			old := Judge(log, floor, ep, tc.version)
			if got := old != nil; got != tc.tooOld {
				t.Fatalf("Judge(%s) = %+v; want too old: %v", tc.version, old, tc.tooOld)
			}
			if tc.tooOld {
				if old.Version != tc.version || old.Endpoint != ep {
					t.Errorf("too old: %+v", old)
				}
				return
			}
			out := buf.String()
			if tc.issues == "" {
				if out != "" {
					t.Errorf("logged %q", out)
				}
				return
			}
			issues := "issues=" + tc.issues
			if strings.Contains(tc.issues, " ") {
				issues = `issues="` + tc.issues + `"`
			}
			for _, want := range []string{"level=WARN", issues, "fixed_in=" + tc.fixedIn, "version=" + tc.version} {
				if !strings.Contains(out, want) {
					t.Errorf("log %q lacks %q", out, want)
				}
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for _, v := range []string{"", "3.5", "3.5.x", "v3.5.0", "3.5.0.1", "3.-1.0"} {
		if _, _, _, ok := parseVersion(v); ok {
			t.Errorf("parseVersion(%q) ok", v)
		}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if old := Judge(log, floor, "e", "garbage"); old != nil || !strings.Contains(buf.String(), "not understood") {
		t.Errorf("an unparsable version: too old %+v, log %q", old, buf.String())
	}
}
