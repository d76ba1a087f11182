package redisguard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/redis/go-redis/v9"
)

// Store is a guard.Store that keeps marks in Redis, so that the replicas
// of an HTTP or gRPC service share them: the mark of resource r is the
// hash at prefix + "{" + r + "}", the key a Guard with the same prefix
// uses, checked and advanced by the same script in one step. It
// implements guard.VerifyingStore and guard.Resetter. A resource must be
// claimed on the Redis server's current life before Advance raises it
// (see ErrUnclaimed and the package documentation, Durability): Claim
// does it, and so does AdvanceVerified, which a guard.Guard with a
// verifier calls, after verifying the token.
//
// A Store does not own its client: close the client after use. It is
// safe for concurrent use.
type Store struct {
	m marks
}

var (
	_ guard.VerifyingStore = (*Store)(nil)
	_ guard.Resetter       = (*Store)(nil)
)

// NewStore returns a Store keeping marks under prefix through cli. prefix
// must not be empty nor contain "{" or "}", and should be used by
// nothing else than marks (DefaultPrefix is a Guard's).
func NewStore(cli redis.UniversalClient, prefix string) (*Store, error) {
	if cli == nil {
		return nil, errors.New("redisguard: nil redis client")
	}
	if prefix == "" {
		return nil, errors.New("redisguard: empty key prefix")
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{m: marks{cli: cli, prefix: prefix}}, nil
}

// Key returns the key of the resource's mark.
func (s *Store) Key(resource string) string { return s.m.markKey(resource) }

// Advance implements guard.Store: in one script it refuses a stale or
// wrong-lock token (returning the mark and a *fence.RefusedError matching
// fence.ErrStale or fence.ErrWrongLock), and otherwise raises the mark to t. A resource
// without a mark of the server's current life is refused with an error
// matching ErrUnclaimed (a guard.Guard reports outcome failed): Claim it
// first, or give the guard.Guard a verifier.
func (s *Store) Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error) {
	return s.advance(ctx, resource, t, modeRaise, nil)
}

// AdvanceVerified implements guard.VerifyingStore. A token equal to the
// mark, stale or of another lock is decided by the script alone; a token
// that would raise the mark, or claim an unclaimed resource, is verified
// with v first and the script run again, raising or claiming only if the
// mark has not moved past t meanwhile. The verification and the advance
// are two steps: between them the holder may lose its lock (see the
// package documentation, The verification window). v's errors are
// returned as they are, with the mark.
func (s *Store) AdvanceVerified(ctx context.Context, resource string, t fence.Token, v guard.Verifier) (fence.Token, error) {
	if v == nil {
		return fence.Token{}, errors.New("redisguard: nil verifier")
	}
	return s.advance(ctx, resource, t, modeDecide, v)
}

// advance runs the mark-only script from mode, verifying with v when the
// script asks (v nil: it never asks, mode is modeRaise).
func (s *Store) advance(ctx context.Context, resource string, t fence.Token, mode string, v guard.Verifier) (fence.Token, error) {
	if err := validateResource(resource); err != nil {
		return fence.Token{}, err
	}
	if err := t.Validate(); err != nil {
		return fence.Token{}, err
	}
	b, _ := s.m.encode(resource, nil) // no commands: cannot fail
	for range 3 {
		res, err := s.m.fence(ctx, resource, t, mode, b, nil)
		if err != nil {
			return fence.Token{}, err
		}
		switch res.status {
		case statusOK:
			return t, nil
		case statusStale, statusWrongLock:
			return res.mark, refusal(resource, res.status, res.mark, t)
		case statusUnclaimed:
			if v == nil {
				return res.mark, unclaimed(resource, res.mark)
			}
			mode = modeClaim
		default: // statusVerify
			mode = modeRaise
		}
		if err := v.Verify(ctx, t); err != nil {
			return res.mark, err
		}
	}
	return fence.Token{}, fmt.Errorf("redisguard: resource %q: the mark kept changing during verification", resource)
}

// Mark implements guard.Store: the resource's mark, of any server life;
// an error matching fence.ErrNoMark when it has none.
func (s *Store) Mark(ctx context.Context, resource string) (fence.Token, error) {
	return markOf(ctx, &s.m, resource)
}

// Claim advances the marks of resources to t and stamps them with the
// Redis server's current life, as Guard.Claim does without a verifier: it
// trusts the caller to be t's lock's current holder, so call it right
// after acquiring the lock (or give the guard.Guard a verifier, which
// claims through AdvanceVerified). A stale or wrong-lock token is refused
// with the error of Advance. Resources are claimed in sorted order; Claim
// stops at the first failure.
func (s *Store) Claim(ctx context.Context, t fence.Token, resources ...string) error {
	rs := slices.Clone(resources)
	slices.Sort(rs)
	for _, r := range slices.Compact(rs) {
		if _, err := s.advance(ctx, r, t, modeClaim, nil); err != nil {
			return fmt.Errorf("redisguard: claim %q: %w", r, err)
		}
	}
	return nil
}

// ResetMark implements guard.Resetter: in one script it sets the
// resource's mark to next, stamped with the server's current life, if it
// is exactly old (the zero Token: none), and returns a
// an error matching fence.ErrMarkChanged otherwise. Use guard.Guard.ResetMark, which
// logs the reset.
func (s *Store) ResetMark(ctx context.Context, resource string, old, next fence.Token) error {
	if err := validateResource(resource); err != nil {
		return err
	}
	if err := guard.ValidateReset(resource, old, next); err != nil {
		return err
	}
	return s.m.reset(ctx, resource, old, next)
}
