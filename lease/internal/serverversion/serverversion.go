// Package serverversion checks the etcd members a lease.Client talks to
// against the oldest server version it supports, and warns of releases
// with known lock-relevant bugs. Its one door is Check, which the lease
// package calls before it grants a session, and which reports a member
// that is too old for the lease package to turn into its
// *ServerVersionError. It is internal to the lease module.
package serverversion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// checkTimeout bounds one check of the members' versions.
const checkTimeout = 5 * time.Second

// TooOld is a member whose version is below the floor.
type TooOld struct {
	Endpoint string // its client URL, as the etcd client knows it
	Version  string // the version it reported
}

// knownIssue is a bug of etcd releases inside the floor that weakens what a
// lock relies on, and the patch release of its minor line that fixed it.
type knownIssue struct {
	minor, fixed int // 3.<minor>.<fixed> is the first release without it
	ref, what    string
}

// knownIssues are the lock-relevant bugs a member's version is checked for
// (from etcd's CHANGELOG-3.5 and -3.6 and its robustness-test list). A
// member that has one is logged at Warn, once.
var knownIssues = []knownIssue{
	{5, 3, "etcd-io/etcd#13766", "inconsistent revision and data between members"},
	{5, 13, "etcd-io/etcd#17529", "watch events lost (loss signals and waiter wake-ups may be missed)"},
	{5, 13, "etcd-io/etcd#17425", "leases wrongly revoked by an old leader (sessions end early)"},
	{5, 18, "etcd-io/etcd#19179", "missing delete event on a watch opened at the compaction revision"},
	{5, 23, "etcd-io/etcd#20616", "lease renewal answered as done for a revoked lease"},
	{5, 28, "etcd-io/etcd#20418", "stale reads from a member whose process paused"},
	{6, 5, "etcd-io/etcd#20615", "lease renewal answered as done for a revoked lease"},
	{6, 9, "etcd-io/etcd#20418", "stale reads from a member whose process paused"},
}

// Check reads the version of each of etcd's endpoints not in checked
// yet (Maintenance.Status, in parallel, for at most 5 s within ctx) and
// returns the first older than floor ("3.5.0"), or nil; a member too old
// is asked again next time (it may have been upgraded), the others are
// added to checked. A member that answers with a known lock-relevant bug
// is logged at Warn. A member that does not answer is checked again next
// time; one that refuses Status (permission, or a proxy without it) is
// logged at Warn and not checked. The caller serialises the Checks of one
// checked set.
func Check(ctx context.Context, etcd *clientv3.Client, checked map[string]struct{}, floor string, log *slog.Logger) *TooOld {
	var eps []string
	for _, ep := range etcd.Endpoints() {
		if _, ok := checked[ep]; !ok {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	versions := make([]string, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := etcd.Status(ctx, ep)
			if err == nil {
				versions[i] = st.Version
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	var tooOld *TooOld
	for i, ep := range eps {
		switch err := errs[i]; {
		case err == nil:
			// A member too old is asked again next time: it may have been
			// upgraded meanwhile.
			if old := Judge(log, floor, ep, versions[i]); old == nil {
				checked[ep] = struct{}{}
			} else if tooOld == nil {
				tooOld = old
			}
		case refusedStatus(err):
			checked[ep] = struct{}{}
			log.Warn("lease server version not checked: Status refused",
				slog.String("endpoint", ep), slog.String("error", err.Error()))
		default:
			log.Debug("lease server version not checked yet", slog.String("endpoint", ep), slog.String("error", err.Error()))
		}
	}
	return tooOld
}

// refusedStatus reports whether err is a refusal of Status itself rather
// than a failure to reach the member.
func refusedStatus(err error) bool {
	if errors.Is(record.RPCError(err), record.ErrPermissionDenied) {
		return true
	}
	code, ok := record.ErrCode(err)
	return ok && code == codes.Unimplemented
}

// Judge returns a *TooOld when v, the version of the member at ep, is
// below floor, and logs the known issues of v.
func Judge(log *slog.Logger, floor, ep, v string) *TooOld {
	major, minor, patch, ok := parseVersion(v)
	if !ok {
		log.Warn("lease server version not understood", slog.String("endpoint", ep), slog.String("version", v))
		return nil
	}
	if fmaj, fmin, fpatch, _ := parseVersion(floor); slices.Compare([]int{major, minor, patch}, []int{fmaj, fmin, fpatch}) < 0 {
		return &TooOld{Endpoint: ep, Version: v}
	}
	var refs, whats []string
	fixed := 0
	for _, k := range knownIssues {
		if major == 3 && minor == k.minor && patch < k.fixed {
			refs = append(refs, k.ref)
			whats = append(whats, k.ref+": "+k.what)
			fixed = max(fixed, k.fixed)
		}
	}
	if len(refs) > 0 {
		log.Warn("lease server has known lock-relevant bugs: upgrade it",
			slog.String("endpoint", ep), slog.String("version", v),
			slog.String("fixed_in", fmt.Sprintf("3.%d.%d", minor, fixed)),
			slog.String("issues", strings.Join(refs, " ")), slog.String("details", strings.Join(whats, "; ")))
	}
	return nil
}

// parseVersion parses "3.5.21" (a "-suffix" ignored).
func parseVersion(v string) (major, minor, patch int, ok bool) {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return 0, 0, 0, false
		}
		n[i] = x
	}
	return n[0], n[1], n[2], true
}
