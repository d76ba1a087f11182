package faults

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactFillers is how many writes CompactedWatch makes before it
// compacts, so that the compaction leaves the holder's watch well behind.
const compactFillers = 8

// CompactedWatch takes a lock from its holder while the holder cannot
// watch: Inject cuts the links through proxies (the holder's client's, as
// Partition does), deletes the holder's record of the lock under
// lockPrefix (comparing its creation revision, as DeleteHolder does),
// writes a few times to a scratch key and compacts etcd's history up to
// the last write. When Heal restores the links, the holder's watch resumes
// from a revision that is gone: etcd cancels it as compacted, and the
// holder's client must find out what it missed (the record's deletion)
// some other way. cli must not be behind proxies. Inject returns
// ErrNoTarget, with the links restored, when nobody holds the lock. Once
// the record is deleted the lock has been taken away: a later failure (the
// writes or the compaction) returns an error matching ErrPartial, with
// the links still cut until Heal. A delete whose reply never came returns
// an error matching ErrOutcomeUnknown, with the links restored. The fault
// is a Taker: Taken names the record it deleted (or may have).
//
// The writes go to ScratchKey, deleted again before compacting. Compaction is for the whole
// cluster: every watcher that is behind loses its watch too.
func CompactedWatch(cli *clientv3.Client, lockPrefix string, proxies ...*Proxy) Fault {
	heal := each(proxies, false, (*Proxy).Resume, (*Proxy).ResetConns)
	return &takeFault{kind: KindCompactedWatch, heal: heal, inject: func(ctx context.Context) (taken []int64, err error) {
		// Find the holder first, so that a lock nobody holds costs the
		// holder's links nothing.
		key, rev, _, err := Holder(ctx, cli, lockPrefix)
		if err != nil {
			return nil, err
		}
		if err := each(proxies, true, (*Proxy).Blackhole)(ctx); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil && !errors.Is(err, ErrPartial) {
				_ = heal(ctx)
			}
		}()
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return []int64{rev}, fmt.Errorf("%w: delete holder's record: %w", ErrOutcomeUnknown, err)
		}
		if !resp.Succeeded {
			return nil, ErrNoTarget // released or replaced meanwhile
		}
		// The lock is taken away: from here on a failure leaves the
		// links cut, for the caller to hold and heal.
		if err := compactAfter(ctx, cli); err != nil {
			return []int64{rev}, fmt.Errorf("%w: the holder's record was deleted: %w", ErrPartial, err)
		}
		return []int64{rev}, nil
	}}
}

// compactAfter writes ScratchKey a few times, deletes it, and compacts the
// history up to that delete.
func compactAfter(ctx context.Context, cli *clientv3.Client) error {
	for i := range compactFillers {
		if _, err := cli.Put(ctx, ScratchKey, fmt.Sprint(i)); err != nil {
			return fmt.Errorf("faults: write before compacting: %w", err)
		}
	}
	del, err := cli.Delete(ctx, ScratchKey)
	if err != nil {
		return fmt.Errorf("faults: write before compacting: %w", err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("faults: compact: %w", err)
	}
	return nil
}

// ScratchKey is the etcd key CompactedWatch writes and deletes before
// compacting. It is outside any lock prefix a lease.Client would use by
// default.
const ScratchKey = "fencekit-faults/compact"
