package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/lease/admin"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchDebounce gathers a burst of changes (a hand-over is a delete and a
// put, often in separate revisions) into one redraw.
const watchDebounce = 50 * time.Millisecond

// watchStatus is "status --watch": it prints the locks, then again after
// every change under the prefix that changes what it prints, until SIGINT
// or SIGTERM.
func watchStatus(conn *connFlags, names []string, asJSON bool, e *Env) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli, err := conn.connect(e)
	if err != nil {
		return fail(e, "status", ExitConn, err)
	}
	defer cli.Close()
	ops, err := admin.New(cli, conn.prefix)
	if err != nil {
		return fail(e, "status", ExitUsage, err)
	}
	f, _ := e.Stdout.(*os.File)
	w := &statusWatch{conn: conn, cli: cli, ops: ops, names: names, asJSON: asJSON, tty: f != nil && isTerminal(f), e: e}
	if code := w.draw(ctx); code >= 0 {
		return code
	}
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		w.follow(ctx, cli.Watch(wctx, conn.prefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1)))
		cancel()
		if ctx.Err() == nil {
			// The watch ended (compacted, or the link was cut): draw
			// what is there now, and watch from it.
			time.Sleep(watchDebounce)
			w.draw(ctx)
		}
	}
	return ExitOK
}

// statusWatch is the state of "status --watch".
type statusWatch struct {
	conn   *connFlags
	cli    *clientv3.Client
	ops    *admin.Admin
	names  []string
	asJSON bool
	tty    bool
	e      *Env
	rev    int64  // the revision last drawn
	last   []byte // what was last drawn, without its header
}

// follow draws after each burst of events until wch ends.
func (w *statusWatch) follow(ctx context.Context, wch clientv3.WatchChan) {
	var due <-chan time.Time
	for {
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				return
			}
			if due == nil {
				due = time.After(watchDebounce)
			}
		case <-due:
			due = nil
			w.draw(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// draw reads the locks and prints them if they changed. It returns -1,
// or on a failure of the first draw the exit code; later failures are
// reported and retried at the next change.
func (w *statusWatch) draw(ctx context.Context) int {
	rctx, cancel := context.WithTimeout(ctx, w.conn.commandTimeout)
	defer cancel()
	states, rev, err := w.read(rctx)
	if err != nil {
		if ctx.Err() != nil {
			return -1
		}
		if w.rev == 0 {
			return fail(w.e, "status", exitCode(err), err)
		}
		fmt.Fprintf(w.e.Stderr, "fencekit status: %s (retrying at the next change)\n", oneLine(err.Error()))
		return -1
	}
	var body bytes.Buffer
	if w.asJSON {
		out := make([]lockJSON, 0, len(states))
		for _, st := range states {
			out = append(out, toLockJSON(st))
		}
		b, _ := json.Marshal(out)
		body.Write(append(b, '\n'))
	} else {
		writeStatus(&body, states)
	}
	w.rev = max(w.rev, rev)
	if bytes.Equal(body.Bytes(), w.last) {
		return -1
	}
	w.last = body.Bytes()
	now := time.Now().UTC().Format(time.RFC3339)
	switch {
	case w.asJSON:
	case w.tty:
		fmt.Fprintf(w.e.Stdout, "\x1b[H\x1b[2J%s  revision %d  (SIGINT stops)\n\n", now, rev)
	default:
		fmt.Fprintf(w.e.Stdout, "== %s revision %d\n", now, rev)
	}
	_, _ = w.e.Stdout.Write(body.Bytes())
	return -1
}

// read returns the states of the watched locks and the revision read.
func (w *statusWatch) read(ctx context.Context) ([]admin.LockState, int64, error) {
	if len(w.names) == 0 {
		states, err := w.ops.InspectAll(ctx)
		var rev int64
		for _, st := range states {
			rev = max(rev, st.Revision)
		}
		if rev == 0 {
			rev, err = w.headRevision(ctx, err)
		}
		return states, rev, err
	}
	var rev int64
	states := make([]admin.LockState, 0, len(w.names))
	for _, n := range w.names {
		st, err := w.ops.Inspect(ctx, n)
		if err != nil {
			return nil, 0, err
		}
		rev = max(rev, st.Revision)
		states = append(states, *st)
	}
	return states, rev, nil
}

// headRevision returns etcd's current revision, after an InspectAll that
// found no lock (and so no revision) and returned err.
func (w *statusWatch) headRevision(ctx context.Context, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	resp, err := w.cli.Get(ctx, w.conn.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
