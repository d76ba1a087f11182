package redisguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of the mark keys of a Guard made without
// WithPrefix.
const DefaultPrefix = "fencekit:mark:"

// Option configures a Guard.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	prefix   string
	verifier guard.Verifier
	obs      observe.Options
}

// WithPrefix sets the prefix of the mark keys (default DefaultPrefix). The
// mark of resource r is the hash at prefix + "{" + r + "}". Guards and
// Stores that share a prefix share marks. The prefix must not contain "{"
// or "}".
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if err := validatePrefix(prefix); err != nil {
			return err
		}
		c.prefix = prefix
		return nil
	})
}

// WithVerifier makes the Guard verify tokens with v (lease.Verifier for
// the locks of package lease) before they raise a mark or claim a
// resource: only the lock's current holder at the time of the check can
// then do either. The Guard remembers, per lock, the last token it
// verified, so a holder's repeated writes cost one verification per
// acquisition; a claim (an unclaimed resource, see ErrUnclaimed) is always
// verified afresh. A token v does not confirm is refused with an error
// matching fence.ErrUnverified; when v cannot tell, the write fails and
// nothing changes.
func WithVerifier(v guard.Verifier) Option {
	return optionFunc(func(c *config) error {
		if v == nil {
			return errors.New("redisguard: nil verifier")
		}
		c.verifier = v
		return nil
	})
}

// Guard runs fenced writes: batches of Redis commands on a resource's
// keys that run only if the token is the resource's lock's and equal to
// or newer than its mark, checked, run and advanced in one server-side
// script. It is safe for concurrent use.
type Guard struct {
	m   marks
	ver guard.Verifier // nil without WithVerifier
	obs *observe.Observer

	mu       sync.Mutex
	verified map[string]int64 // lock name -> revision last verified
}

// New returns a Guard writing through cli (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client). A Guard does not
// own cli: close it after use.
func New(cli redis.UniversalClient, opts ...Option) (*Guard, error) {
	if cli == nil {
		return nil, errors.New("redisguard: nil redis client")
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("redisguard: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	obs, err := observe.New(spec, cfg.obs)
	if err != nil {
		return nil, err
	}
	return &Guard{m: marks{cli: cli, prefix: cfg.prefix}, ver: cfg.verifier, obs: obs, verified: map[string]int64{}}, nil
}

// MarkKey returns the key of the resource's mark, a hash with the fields
// "rev", "lock" and "life". Do not write it: use Claim and ResetMark.
func (g *Guard) MarkKey(resource string) string { return g.m.markKey(resource) }

// Exec runs cmds, in order, as one fenced write for tgt with token t, and
// returns their replies (one per command: "OK" or nil for SET, int64 for
// the counting commands). cmds run only if t is valid, for tgt's lock,
// and equal to or newer than the resource's mark, which is then raised to
// t; the check, the commands and the advance are one Lua function, so no
// other write of the resource's keys through this package lands between
// them. Every key must be in the hash slot of the resource's mark (build
// keys with Key).
//
// Otherwise nothing changes and Exec returns an error matching:
//
//   - a *fence.RefusedError naming the resource, the token and the mark,
//     matching fence.ErrStale (the token is older than the mark),
//     fence.ErrWrongLock (the token or the mark is another lock's),
//     fence.ErrInvalid (t is invalid) or fence.ErrUnverified (the Guard's
//     verifier did not confirm t, which would have raised the mark or
//     claimed the resource);
//   - guard.ErrInvalidTarget, ErrBadCommand or ErrCrossSlot: bad input,
//     refused before sending;
//   - ErrUnclaimed: the resource has no mark of this Redis server's life
//     and the Guard has no verifier (see the package documentation);
//   - ErrCommand: Redis refused a command while running it (a
//     *CommandError); the batch's earlier commands are undone;
//   - or another error: the verifier could not tell, ctx ended, or Redis
//     failed. Only a Redis failure after sending (a broken connection, a
//     timeout) leaves the outcome unknown; the script itself is atomic.
func (g *Guard) Exec(ctx context.Context, tgt guard.Target, t fence.Token, cmds ...Cmd) ([]any, error) {
	if len(cmds) == 0 {
		err := fmt.Errorf("%w: a fenced write of no commands (use Claim to advance a mark)", ErrBadCommand)
		return nil, g.refuseEarly(ctx, opExec, tgt, t, err)
	}
	return g.run(ctx, opExec, tgt, t, cmds, false)
}

// Set runs SET key value [opts] as a fenced write (see Exec). It reports
// whether the key was set: false when NX or XX kept it from being set.
func (g *Guard) Set(ctx context.Context, tgt guard.Target, t fence.Token, key, value string, opts ...SetOption) (bool, error) {
	r, err := g.run(ctx, opSet, tgt, t, []Cmd{Set(key, value, opts...)}, false)
	if err != nil {
		return false, err
	}
	return r[0] != nil, nil
}

// HSet runs HSET key field value [field value ...] as a fenced write (see
// Exec) and returns the number of fields added.
func (g *Guard) HSet(ctx context.Context, tgt guard.Target, t fence.Token, key string, fieldValues ...string) (int64, error) {
	return g.runInt(ctx, opHSet, tgt, t, HSet(key, fieldValues...))
}

// Del deletes keys as one fenced write (see Exec) and returns how many
// existed.
func (g *Guard) Del(ctx context.Context, tgt guard.Target, t fence.Token, keys ...string) (int64, error) {
	if len(keys) == 0 {
		err := fmt.Errorf("%w: DEL of no keys", ErrBadCommand)
		return 0, g.refuseEarly(ctx, opDel, tgt, t, err)
	}
	cmds := make([]Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = Del(k)
	}
	r, err := g.run(ctx, opDel, tgt, t, cmds, false)
	var n int64
	for _, v := range r {
		x, _ := v.(int64)
		n += x
	}
	return n, err
}

// IncrBy runs INCRBY key n as a fenced write (see Exec) and returns the
// new value.
func (g *Guard) IncrBy(ctx context.Context, tgt guard.Target, t fence.Token, key string, n int64) (int64, error) {
	return g.runInt(ctx, opIncrBy, tgt, t, IncrBy(key, n))
}

func (g *Guard) runInt(ctx context.Context, op string, tgt guard.Target, t fence.Token, c Cmd) (int64, error) {
	r, err := g.run(ctx, op, tgt, t, []Cmd{c}, false)
	if err != nil {
		return 0, err
	}
	n, ok := r[0].(int64)
	if !ok {
		return 0, fmt.Errorf("redisguard: %s replied %T, not an integer", c.name, r[0])
	}
	return n, nil
}

// Claim advances the marks of resources to t, each bound to t's lock, and
// stamps them with the Redis server's current life: the first step of a
// new holder, before it reads state it will overwrite, and what a
// resource needs after a Redis restart (see ErrUnclaimed). With a
// verifier, t is verified first (afresh, whatever the Guard remembers)
// and refused unless it is its lock's current holder's; without one,
// Claim trusts the caller to be that holder: call it right after
// acquiring the lock, never from code that may run late.
//
// A token older than a resource's mark, or of another lock, is refused as
// by Exec, even for a mark of an earlier server life. Resources are
// claimed one at a time, in sorted order; Claim stops at the first
// failure and returns its error, and resources claimed before it stay
// claimed.
func (g *Guard) Claim(ctx context.Context, t fence.Token, resources ...string) error {
	rs := slices.Clone(resources)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	verified := false
	for _, r := range rs {
		tgt := guard.Target{Resource: r, Lock: t.Lock}
		if _, err := g.run(ctx, opClaim, tgt, t, nil, !verified); err != nil {
			return err
		}
		verified = true
	}
	return nil
}

// Mark returns the resource's mark: the highest token accepted for it, of
// any server life. When it has none it returns an error matching
// fence.ErrNoMark.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Token, error) {
	return markOf(ctx, &g.m, resource)
}

// ResetMark sets the resource's mark back from old (exactly its mark, the
// zero Token for none) to next, stamped with the server's current life:
// an operator's recovery from a mark ahead of the lock service (see
// fence.ErrMarkAhead). It returns an error matching fence.ErrMarkChanged
// and changes nothing when the mark is not old, and is logged at Warn with both marks.
func (g *Guard) ResetMark(ctx context.Context, resource string, old, next fence.Token) error {
	if err := validateResource(resource); err != nil {
		return err
	}
	if err := guard.ValidateReset(resource, old, next); err != nil {
		return err
	}
	if err := g.m.reset(ctx, resource, old, next); err != nil {
		return err
	}
	g.logReset(ctx, resource, old, next)
	return nil
}

// markOf is Mark for Guard and Store.
func markOf(ctx context.Context, m *marks, resource string) (fence.Token, error) {
	if err := validateResource(resource); err != nil {
		return fence.Token{}, err
	}
	mark, err := m.mark(ctx, resource)
	if err == nil && mark.IsZero() {
		err = fmt.Errorf("redisguard: resource %q: %w", resource, fence.ErrNoMark)
	}
	return mark, err
}

// run decides and runs one fenced write (or, with no cmds, a claim when
// claim is set), observing the decision.
func (g *Guard) run(ctx context.Context, op string, tgt guard.Target, t fence.Token, cmds []Cmd, claim bool) ([]any, error) {
	sctx, span := g.obs.Start(ctx, event{Op: op, Resource: tgt.Resource, Lock: tgt.Lock})
	replies, ev := g.decide(sctx, tgt, t, cmds, op == opClaim, claim)
	ev.Op = op
	g.obs.Observe(sctx, span, ev)
	return replies, ev.Err
}

// refuseEarly observes a request refused before any check, and returns err.
func (g *Guard) refuseEarly(ctx context.Context, op string, tgt guard.Target, t fence.Token, err error) error {
	ev := event{Op: op, Outcome: fence.Failed, Resource: tgt.Resource, Lock: tgt.Lock, Token: t, Err: err}
	sctx, span := g.obs.Start(ctx, ev)
	g.obs.Observe(sctx, span, ev)
	return err
}

// decide checks the request, then runs the script until it answers:
// at most three times, when it asks for a verification (verify, or
// unclaimed with a verifier). isClaim makes an empty batch a claim;
// fresh makes the claim verify t afresh.
func (g *Guard) decide(ctx context.Context, tgt guard.Target, t fence.Token, cmds []Cmd, isClaim, fresh bool) ([]any, event) {
	ev := event{Resource: tgt.Resource, Lock: tgt.Lock, Token: t}
	b, err := g.check(tgt, t, cmds)
	if err != nil {
		ev.Outcome, ev.Err = fence.OutcomeOf(err), err
		return nil, ev
	}
	mode := g.mode(t)
	if isClaim {
		if g.ver != nil && fresh {
			if err := g.verify(ctx, tgt.Resource, t, fence.Token{}); err != nil {
				setVerifyErr(&ev, err)
				return nil, ev
			}
		}
		mode = modeClaim
	}
	for range 3 {
		res, err := g.m.fence(ctx, tgt.Resource, t, mode, b, cmds)
		if err != nil {
			ev.Outcome, ev.Err = fence.Failed, err
			return nil, ev
		}
		ev.Mark = res.mark
		next, done := g.answer(ctx, tgt, t, res, &ev)
		if done {
			return res.replies, ev
		}
		mode = next
	}
	ev.Outcome, ev.Err = fence.Failed, fmt.Errorf("redisguard: resource %q: the mark kept changing during verification", tgt.Resource)
	return nil, ev
}

// check validates a request and encodes its commands.
func (g *Guard) check(tgt guard.Target, t fence.Token, cmds []Cmd) (batch, error) {
	if err := validateResource(tgt.Resource); err != nil {
		return batch{}, err
	}
	if err := fence.ValidateName(tgt.Lock); err != nil {
		return batch{}, fmt.Errorf("%w: resource %q: %w", guard.ErrInvalidTarget, tgt.Resource, err)
	}
	if err := t.Validate(); err != nil {
		return batch{}, &fence.RefusedError{Outcome: fence.Malformed, Resource: tgt.Resource, Lock: tgt.Lock, Token: t, Err: err}
	}
	if t.Lock != tgt.Lock {
		return batch{}, &fence.RefusedError{Outcome: fence.WrongLock, Resource: tgt.Resource, Lock: tgt.Lock, Token: t}
	}
	b, err := g.m.encode(tgt.Resource, cmds)
	if err != nil {
		return batch{}, fmt.Errorf("redisguard: resource %q: %w", tgt.Resource, err)
	}
	return b, nil
}

// answer turns the script's result into ev's decision (done), or into the
// mode to run it again in after a verification.
func (g *Guard) answer(ctx context.Context, tgt guard.Target, t fence.Token, res result, ev *event) (mode string, done bool) {
	switch res.status {
	case statusOK:
		ev.Outcome = fence.Accepted
		ev.Mark = t
		return "", true
	case statusError:
		ev.Outcome, ev.Err = fence.Failed, res.cmdErr
		return "", true
	case statusStale, statusWrongLock:
		ev.Outcome = fence.Stale
		if res.status == statusWrongLock {
			ev.Outcome = fence.WrongLock
		}
		ev.Err = refusal(tgt.Resource, res.status, res.mark, t)
		return "", true
	case statusVerify:
		if err := g.verify(ctx, tgt.Resource, t, res.mark); err != nil {
			setVerifyErr(ev, err)
			return "", true
		}
		return modeRaise, false
	}
	// statusUnclaimed
	if g.ver == nil {
		ev.Outcome, ev.Err = fence.Failed, unclaimed(tgt.Resource, res.mark)
		return "", true
	}
	if err := g.verify(ctx, tgt.Resource, t, res.mark); err != nil {
		setVerifyErr(ev, err)
		return "", true
	}
	return modeClaim, false
}

// mode is the script mode of a first run for t: a raise needs no
// verification without a verifier, or when t is the last token of its
// lock this Guard verified.
func (g *Guard) mode(t fence.Token) string {
	if g.ver == nil {
		return modeRaise
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verified[t.Lock] == t.Revision {
		return modeRaise
	}
	return modeDecide
}

// verify asks the verifier about t and remembers a confirmed token. It
// returns a *fence.RefusedError for a token the verifier does not
// confirm, and other errors wrapped.
func (g *Guard) verify(ctx context.Context, resource string, t, mark fence.Token) error {
	if err := g.ver.Verify(ctx, t); err != nil {
		if errors.Is(err, fence.ErrUnverified) {
			return unverified(resource, t, mark, err)
		}
		return fmt.Errorf("redisguard: verify token for %q: %w", resource, err)
	}
	g.mu.Lock()
	if g.verified[t.Lock] < t.Revision {
		g.verified[t.Lock] = t.Revision
	}
	g.mu.Unlock()
	return nil
}
