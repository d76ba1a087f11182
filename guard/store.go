package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store keeps the marks of resources: per resource, the highest token
// accepted. Implementations must be safe for concurrent use.
type Store interface {
	// Advance applies fence.Check(mark, t) to the resource's mark and,
	// when t passes, raises the mark to fence.Max(mark, t), as one atomic
	// step with respect to every other Advance of the resource through the
	// same store, in any process. It returns the mark after the step.
	//
	// When t is refused it returns the mark that refused it and the error
	// from fence.Check (matching fence.ErrStale, fence.ErrWrongLock or
	// fence.ErrInvalid), and the mark is unchanged. Any other error means
	// the store could not decide; the mark may or may not have advanced.
	Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error)
	// Mark returns the resource's mark, or the zero Token when none was
	// accepted.
	Mark(ctx context.Context, resource string) (fence.Token, error)
}

// MemoryStore is a Store in process memory. Its marks are lost when the
// process exits, and each process has its own: use it only when one
// process serves a resource and a restart may forget the marks (a holder
// superseded before the restart could write once more after it). The zero
// MemoryStore is ready to use; it is safe for concurrent use.
type MemoryStore struct {
	mu    sync.Mutex
	marks map[string]fence.Token
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Advance implements Store.
func (s *MemoryStore) Advance(_ context.Context, resource string, t fence.Token) (fence.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mark := s.marks[resource]
	if err := fence.Check(mark, t); err != nil {
		return mark, err
	}
	mark = fence.Max(mark, t)
	if s.marks == nil {
		s.marks = map[string]fence.Token{}
	}
	s.marks[resource] = mark
	return mark, nil
}

// Mark implements Store.
func (s *MemoryStore) Mark(_ context.Context, resource string) (fence.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marks[resource], nil
}

// EtcdStore is a Store that keeps marks in etcd, one key per resource
// under a prefix, holding the mark's text form (fence.Token.String).
// Replicas of a service that share an EtcdStore's prefix share its marks,
// and the marks survive restarts. Advance reads the key and, when the
// token is newer, writes it in a Txn that compares the key's ModRevision
// with the one read, retrying on conflict; an equal token is accepted by
// the linearizable read alone.
//
// An EtcdStore does not own its client: close the client after use. It is
// safe for concurrent use.
type EtcdStore struct {
	cli    *clientv3.Client
	prefix string
}

// NewEtcdStore returns a store keeping marks under prefix through cli. The
// key of a resource is prefix followed by the resource name; prefix must
// not be empty and should end in "/" and be used by nothing else.
func NewEtcdStore(cli *clientv3.Client, prefix string) (*EtcdStore, error) {
	if cli == nil {
		return nil, errors.New("guard: nil etcd client")
	}
	if prefix == "" {
		return nil, errors.New("guard: empty etcd key prefix")
	}
	return &EtcdStore{cli: cli, prefix: prefix}, nil
}

// Key returns the etcd key holding the resource's mark. A write to data
// in the same etcd cluster can be made atomic with the mark by putting
// clientv3.Compare(clientv3.Value(s.Key(resource)), "=", t.String()) in
// its Txn: it then fails once a newer token has advanced the mark.
func (s *EtcdStore) Key(resource string) string { return s.prefix + resource }

// Advance implements Store.
func (s *EtcdStore) Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error) {
	if resource == "" {
		return fence.Token{}, fmt.Errorf("%w: empty resource name", ErrInvalidTarget)
	}
	if err := t.Validate(); err != nil {
		return fence.Token{}, err
	}
	key := s.Key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("guard: read mark: %w", err)
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
			return fence.Token{}, fmt.Errorf("guard: advance mark: %w", err)
		}
		if txn.Succeeded {
			return t, nil
		}
		kvs = txn.Responses[0].GetResponseRange().GetKvs()
	}
}

// Mark implements Store.
func (s *EtcdStore) Mark(ctx context.Context, resource string) (fence.Token, error) {
	key := s.Key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("guard: read mark: %w", err)
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
		return fence.Token{}, 0, fmt.Errorf("guard: mark at etcd key %q: %w", key, err)
	}
	return mark, kvs[0].ModRevision, nil
}
