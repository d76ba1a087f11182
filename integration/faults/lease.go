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
// applied. cli must be a client
// the fault may use freely: not one behind a proxy the test disrupts.
func RevokeHolder(cli *clientv3.Client, lockPrefix string) Fault {
	return &funcFault{kind: KindRevoke, inject: func(ctx context.Context) error {
		_, _, id, err := Holder(ctx, cli, lockPrefix)
		if err != nil {
			return err
		}
		if id == clientv3.NoLease {
			return ErrNoTarget
		}
		if _, err := cli.Revoke(ctx, id); err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("faults: revoke holder's lease: %w", err)
			}
			return fmt.Errorf("%w: revoke holder's lease: %w", ErrOutcomeUnknown, err)
		}
		return nil
	}}
}

// DeleteHolder deletes the current holder's record of the lock under
// lockPrefix behind the holder's back, comparing its creation revision so
// that it never deletes a newer record by mistake. The next waiter, if any,
// becomes the holder. Heal does nothing. A delete whose reply never came
// returns an error matching ErrOutcomeUnknown: it may have applied.
func DeleteHolder(cli *clientv3.Client, lockPrefix string) Fault {
	return &funcFault{kind: KindDeleteKey, inject: func(ctx context.Context) error {
		key, rev, _, err := Holder(ctx, cli, lockPrefix)
		if err != nil {
			return err
		}
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return fmt.Errorf("%w: delete holder's record: %w", ErrOutcomeUnknown, err)
		}
		if !resp.Succeeded {
			return ErrNoTarget // released or replaced meanwhile
		}
		return nil
	}}
}
