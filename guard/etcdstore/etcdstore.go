package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is a guard.Store that keeps marks in etcd, one key per resource
// under a prefix, holding the mark's text form (fence.Token.String).
// Replicas of a service that share a Store's prefix share its marks,
// and the marks survive restarts. Advance reads the key and, when the
// token is newer, writes it in a Txn that compares the key's ModRevision
// with the one read, retrying on conflict; an equal token is accepted by
// the linearizable read alone.
//
// A Store does not own its client: close the client after use. It is
// safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
}

// New returns a store keeping marks under prefix through cli. The
// key of a resource is prefix followed by the resource name; prefix must
// not be empty and should end in "/" and be used by nothing else.
func New(cli *clientv3.Client, prefix string) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcdstore: nil etcd client")
	}
	if prefix == "" {
		return nil, errors.New("etcdstore: empty etcd key prefix")
	}
	return &Store{cli: cli, prefix: prefix}, nil
}

// Key returns the etcd key holding the resource's mark. A write to data
// in the same etcd cluster can be made atomic with the mark by putting
// clientv3.Compare(clientv3.Value(s.Key(resource)), "=", t.String()) in
// its Txn: it then fails once a newer token has advanced the mark.
func (s *Store) Key(resource string) string { return s.prefix + resource }

// Advance implements guard.Store.
func (s *Store) Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error) {
	return s.advance(ctx, resource, t, nil)
}

// Mark implements guard.Store: it returns an error matching
// fence.ErrNoMark for a resource without a mark.
func (s *Store) Mark(ctx context.Context, resource string) (fence.Token, error) {
	key := s.Key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("etcdstore: read mark: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return fence.Token{}, fmt.Errorf("etcdstore: resource %q: %w", resource, fence.ErrNoMark)
	}
	mark, _, err := decodeMark(key, resp.Kvs)
	return mark, err
}

// decodeMark returns the mark stored in kvs (at most one pair) and its
// ModRevision; zero values when the key is absent.
func decodeMark(key string, kvs []*mvccpb.KeyValue) (fence.Token, int64, error) {
	if len(kvs) == 0 {
		return fence.Token{}, 0, nil
	}
	mark, err := fence.Parse(string(kvs[0].Value))
	if err != nil {
		return fence.Token{}, 0, fmt.Errorf("etcdstore: mark at etcd key %q: %w", key, err)
	}
	return mark, kvs[0].ModRevision, nil
}

// ResetMark implements guard.Resetter: in one Txn, it sets the resource's
// mark to next if the key holds exactly old (or is absent, for the zero
// old), and returns an error matching fence.ErrMarkChanged otherwise. Use
// guard.Guard.ResetMark, which logs the reset and waits for the
// resource's in-flight write through that Guard; writes through other
// replicas' Guards are not waited for.
func (s *Store) ResetMark(ctx context.Context, resource string, old, next fence.Token) error {
	if err := guard.ValidateReset(resource, old, next); err != nil {
		return err
	}
	key := s.Key(resource)
	cmp := clientv3.Compare(clientv3.Value(key), "=", old.String())
	if old.IsZero() {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, next.String())).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: reset mark: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	mark, _, err := decodeMark(key, resp.Responses[0].GetResponseRange().GetKvs())
	if err != nil {
		return err
	}
	return fmt.Errorf("etcdstore: mark of %q is %s, not %s: not reset: %w", resource, mark, old, fence.ErrMarkChanged)
}

// Conditioner is implemented by verifiers that can state "t is its lock's
// current holder's" as a comparison in a Txn of their etcd cluster
// (lease.Verifier does). Condition verifies t like Verify and, for a
// genuine token, returns that comparison and the cluster's ID.
type Conditioner interface {
	guard.Verifier
	Condition(ctx context.Context, t fence.Token) (cmp clientv3.Cmp, clusterID uint64, err error)
}

// AdvanceVerified implements guard.VerifyingStore, which a Guard with a
// verifier uses: it decides an equal, stale or wrong-lock token from the
// mark alone, like Advance, and verifies a token that would raise the
// mark with v first. When v is a Conditioner of the same etcd cluster as
// the store, the mark's compare-and-swap Txn also compares v's condition,
// so the mark rises only if t's holder still holds the lock when it
// does: the check and the advance are one atomic step. Otherwise (another
// cluster, or a verifier without Condition) the check precedes the Txn,
// and the mark can rise to a token whose holder lost the lock in between.
// v's errors are returned as they are, with the unchanged mark.
func (s *Store) AdvanceVerified(ctx context.Context, resource string, t fence.Token, v guard.Verifier) (fence.Token, error) {
	if v == nil {
		return fence.Token{}, errors.New("etcdstore: nil verifier")
	}
	return s.advance(ctx, resource, t, v)
}

// advance is Advance, and AdvanceVerified for a non-nil v: it reads the
// mark, decides an equal, stale or wrong-lock token from it, and raises it
// to a newer t in a Txn that compares the key's ModRevision with the one
// read (and v's condition, see AdvanceVerified), deciding again on
// conflict.
func (s *Store) advance(ctx context.Context, resource string, t fence.Token, v guard.Verifier) (fence.Token, error) {
	if resource == "" {
		return fence.Token{}, fmt.Errorf("%w: empty resource name", guard.ErrInvalidTarget)
	}
	if err := t.Validate(); err != nil {
		return fence.Token{}, err
	}
	key := s.Key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("etcdstore: read mark: %w", err)
	}
	kvs, cluster := resp.Kvs, resp.Header.ClusterId
	for {
		mark, modRev, err := decodeMark(key, kvs)
		if err != nil {
			return fence.Token{}, err
		}
		if err := fence.Check(mark, t); err != nil {
			return mark, err
		}
		if mark == t {
			return mark, nil
		}
		conds := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)}
		if v != nil {
			cmp, err := verified(ctx, t, v, cluster)
			if err != nil {
				return mark, err
			}
			conds = append(conds, cmp...)
		}
		txn, err := s.cli.Txn(ctx).If(conds...).Then(clientv3.OpPut(key, t.String())).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fence.Token{}, fmt.Errorf("etcdstore: advance mark: %w", err)
		}
		if txn.Succeeded {
			return t, nil
		}
		// The mark moved or t's holder let go: decide again.
		kvs = txn.Responses[0].GetResponseRange().GetKvs()
	}
}

// verified verifies t with v and returns the comparisons the Txn that
// raises the mark must add: v's condition when v is a Conditioner of the
// store's etcd cluster, and none otherwise (v has then verified t).
func verified(ctx context.Context, t fence.Token, v guard.Verifier, cluster uint64) ([]clientv3.Cmp, error) {
	c, ok := v.(Conditioner)
	if !ok {
		return nil, v.Verify(ctx, t)
	}
	cmp, id, err := c.Condition(ctx, t)
	if err != nil || id != cluster {
		return nil, err
	}
	return []clientv3.Cmp{cmp}, nil
}
