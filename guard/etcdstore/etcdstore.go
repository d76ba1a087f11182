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
	kvs := resp.Kvs
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
		txn, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, t.String())).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fence.Token{}, fmt.Errorf("etcdstore: advance mark: %w", err)
		}
		if txn.Succeeded {
			return t, nil
		}
		kvs = txn.Responses[0].GetResponseRange().GetKvs()
	}
}

// Mark implements guard.Store.
func (s *Store) Mark(ctx context.Context, resource string) (fence.Token, error) {
	key := s.Key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("etcdstore: read mark: %w", err)
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
// old), and returns a *guard.MarkChangedError otherwise. Use
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
	return &guard.MarkChangedError{Resource: resource, Want: old, Mark: mark}
}
