package faults

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LockPrefix returns the etcd key prefix under which package lease keeps the
// records of the lock called name, for a lease.Client with the given key
// prefix (lease.DefaultPrefix unless lease.WithPrefix was used).
func LockPrefix(prefix, name string) string {
	if prefix != "" && prefix[len(prefix)-1] != '/' {
		prefix += "/"
	}
	return prefix + name + "/"
}

// Holder returns the record of the current holder of the lock whose records
// live under lockPrefix (see LockPrefix): the record with the lowest creation
// revision. It returns ErrNoTarget when nobody holds the lock.
func Holder(ctx context.Context, cli *clientv3.Client, lockPrefix string) (key string, createRev int64, leaseID clientv3.LeaseID, err error) {
	resp, err := cli.Get(ctx, lockPrefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", 0, 0, fmt.Errorf("faults: find holder: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, 0, ErrNoTarget
	}
	kv := resp.Kvs[0]
	return string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease), nil
}

// RevokeHolder revokes, behind the holder's back, the etcd lease that the
// current holder's record of the lock under lockPrefix is attached to: the
// record, and every other record of that lease (with package lease, every
// lock of the holder's lease.Client), is deleted at once. It is the fault
// of an operator or a buggy peer revoking a lease it does not own. The
// holder learns it only from etcd; Heal does nothing. A revoke whose reply
// never came returns an error matching ErrOutcomeUnknown: it may have
// applied. The fault is a Taker: Taken names the records the revoke
// deleted, read at the revision before it, or, when that history is
// compacted or the outcome is unknown, the lease's records read just
// before the revoke (a record written between that read and the revoke
// is then missing). cli must be a client the fault may use freely: not
// one behind a proxy the test disrupts.
func RevokeHolder(cli *clientv3.Client, lockPrefix string) Fault {
	return &takeFault{kind: KindRevoke, inject: func(ctx context.Context) ([]int64, error) {
		_, _, id, err := Holder(ctx, cli, lockPrefix)
		if err != nil {
			return nil, err
		}
		if id == clientv3.NoLease {
			return nil, ErrNoTarget
		}
		before, err := attached(ctx, cli, id, 0)
		if err != nil {
			return nil, fmt.Errorf("faults: read the holder's records: %w", err)
		}
		resp, err := cli.Revoke(ctx, id)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return nil, fmt.Errorf("faults: revoke holder's lease: %w", err)
		case err != nil:
			return before, fmt.Errorf("%w: revoke holder's lease: %w", ErrOutcomeUnknown, err)
		}
		// The revoke deleted every record of the lease in one revision:
		// the records it took are those of the revision before. Read
		// them there (a record may have been written since the first
		// read), or keep the first read if that history is gone.
		if at, err := attached(ctx, cli, id, resp.Header.Revision-1); err == nil {
			return at, nil
		}
		return before, nil
	}}
}

// attached returns the creation revisions of the keys attached to lease
// id at revision rev (0: now).
func attached(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, rev int64) ([]int64, error) {
	opts := []clientv3.OpOption{clientv3.WithFromKey()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(ctx, "\x00", opts...)
	if err != nil {
		return nil, err
	}
	var revs []int64
	for _, kv := range resp.Kvs {
		if clientv3.LeaseID(kv.Lease) == id {
			revs = append(revs, kv.CreateRevision)
		}
	}
	return revs, nil
}

// DeleteHolder deletes the current holder's record of the lock under
// lockPrefix behind the holder's back, comparing its creation revision so
// that it never deletes a newer record by mistake. The next waiter, if any,
// becomes the holder. Heal does nothing. A delete whose reply never came
// returns an error matching ErrOutcomeUnknown: it may have applied. The
// fault is a Taker: Taken names the record it deleted (or may have).
func DeleteHolder(cli *clientv3.Client, lockPrefix string) Fault {
	return &takeFault{kind: KindDeleteKey, inject: func(ctx context.Context) ([]int64, error) {
		key, rev, _, err := Holder(ctx, cli, lockPrefix)
		if err != nil {
			return nil, err
		}
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return []int64{rev}, fmt.Errorf("%w: delete holder's record: %w", ErrOutcomeUnknown, err)
		}
		if !resp.Succeeded {
			return nil, ErrNoTarget // released or replaced meanwhile
		}
		return []int64{rev}, nil
	}}
}
