package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/lease/internal/record"
	"google.golang.org/grpc/codes"
)

// MinServerVersion is the oldest etcd server version a Client works with.
// Acquire refuses members older than this with a *ServerVersionError.
const MinServerVersion = "3.5.0"

// versionCheckTimeout bounds one check of the members' versions.
const versionCheckTimeout = 5 * time.Second

// ServerVersionError reports an etcd member older than MinServerVersion.
// It matches ErrServerTooOld.
type ServerVersionError struct {
	// Endpoint is the client URL of the member, as the etcd client knows
	// it.
	Endpoint string
	// Version is the server version the member reported.
	Version string
	// Floor is MinServerVersion.
	Floor string
}

func (e *ServerVersionError) Error() string {
	return fmt.Sprintf("lease: etcd server %s at %s is older than %s, the oldest supported", e.Version, e.Endpoint, e.Floor)
}

// Is reports whether target is ErrServerTooOld.
func (e *ServerVersionError) Is(target error) bool { return target == ErrServerTooOld }

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

// checkServers reads the version of each of the etcd client's endpoints
// not checked yet (Maintenance.Status, in parallel, for at most
// versionCheckTimeout within ctx) and returns a *ServerVersionError for the
// first older than MinServerVersion (asked again next time: it may have
// been upgraded). A member that answers with a known
// lock-relevant bug is logged at Warn. A member that does not answer is
// checked again before the next session is granted; one that refuses
// Status (permission, or a proxy without it) is logged at Warn and not
// checked. c.sessions.grant is held.
func (c *Client) checkServers(ctx context.Context) error {
	var eps []string
	for _, ep := range c.etcd.Endpoints() {
		if _, ok := c.sessions.checked[ep]; !ok {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, versionCheckTimeout)
	defer cancel()
	versions := make([]string, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.etcd.Status(ctx, ep)
			if err == nil {
				versions[i] = st.Version
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	var tooOld error
	for i, ep := range eps {
		switch err := errs[i]; {
		case err == nil:
			// A member too old is asked again next time: it may have been
			// upgraded meanwhile.
			if err := c.judgeVersion(ep, versions[i]); err == nil {
				c.sessions.checked[ep] = struct{}{}
			} else if tooOld == nil {
				tooOld = err
			}
		case refusedStatus(err):
			c.sessions.checked[ep] = struct{}{}
			c.log.Warn("lease server version not checked: Status refused",
				slog.String("endpoint", ep), slog.String("error", err.Error()))
		default:
			c.log.Debug("lease server version not checked yet", slog.String("endpoint", ep), slog.String("error", err.Error()))
		}
	}
	return tooOld
}

// refusedStatus reports whether err is a refusal of Status itself rather
// than a failure to reach the member.
func refusedStatus(err error) bool {
	if errors.Is(record.RPCError(err), ErrPermissionDenied) {
		return true
	}
	code, ok := record.ErrCode(err)
	return ok && code == codes.Unimplemented
}

// judgeVersion returns a *ServerVersionError when v is below the floor,
// and logs the known issues of v.
func (c *Client) judgeVersion(ep, v string) error {
	major, minor, patch, ok := parseVersion(v)
	if !ok {
		c.log.Warn("lease server version not understood", slog.String("endpoint", ep), slog.String("version", v))
		return nil
	}
	if major < 3 || major == 3 && minor < 5 {
		return &ServerVersionError{Endpoint: ep, Version: v, Floor: MinServerVersion}
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
		c.log.Warn("lease server has known lock-relevant bugs: upgrade it",
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
