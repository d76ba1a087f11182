package shard

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fencekit/lease"
)

// worker drives one shard of one member: it acquires the shard's lock
// while the assignment gives the shard to the member, and releases it to
// the successor when the assignment moves it away.
type worker struct {
	m    *Member
	i    int
	wake chan struct{} // capacity 1: the view changed

	mu      sync.Mutex // guards the view and running
	want    bool       // the assignment gives the shard to this member
	to      string     // the member the assignment gives it to, "" for none
	from    string     // the member it gave the shard to before this member, "" for none
	since   time.Time  // when want last changed
	running bool       // a goroutine runs this worker
}

// set records the assignment's view of the shard, and starts the worker's
// goroutine when the member should own the shard and none runs. Only the
// follower calls it, and never after the member's context ended and the
// follower returned, so workers are never added to a finished WaitGroup.
func (w *worker) set(want bool, to string) {
	w.mu.Lock()
	changed := w.want != want || w.to != to
	if w.want != want {
		w.since = time.Now()
		if want {
			w.from = w.to
		}
	}
	w.want, w.to = want, to
	start := want && !w.running && w.m.ctx.Err() == nil
	if start {
		w.running = true
		w.m.workers.Add(1)
	}
	w.mu.Unlock()
	if start {
		go w.run()
	} else if changed {
		notify(w.wake)
	}
}

// view returns the assignment's view of the shard.
func (w *worker) view() (want bool, to string, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.want, w.to, w.since
}

func (w *worker) shard() string { return w.m.g.shards[w.i] }

// run acquires and holds the shard while the member should own it.
func (w *worker) run() {
	defer w.m.workers.Done()
	backoff := 50 * time.Millisecond
	for {
		w.mu.Lock()
		if !w.want || w.m.ctx.Err() != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		l, cause, err := w.acquire()
		if l != nil {
			w.hold(l, cause)
			backoff = 50 * time.Millisecond
			continue
		}
		if w.m.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			w.m.g.cfg.log.Warn("shard acquire failed", w.attrs(slog.String("error", err.Error()))...)
			sleep(w.m.ctx, backoff)
			backoff = min(2*backoff, time.Second)
		}
	}
}

func (w *worker) attrs(extra ...slog.Attr) []any {
	a := []any{slog.String("group", w.m.g.name), slog.String("member", w.m.name), slog.String("shard", w.shard())}
	for _, e := range extra {
		a = append(a, e)
	}
	return a
}

// acquire waits in the shard lock's queue until admitted, or until the
// assignment no longer gives the shard to the member (then it returns a
// nil lease and context.Canceled). While it waits it asks the holder, if
// any, to let go (see ask). cause is "handoff" when a holder was asked,
// "free" otherwise.
func (w *worker) acquire() (l *lease.Lease, cause string, err error) {
	ctx, cancel := context.WithCancel(w.m.ctx)
	defer cancel()
	type result struct {
		l   *lease.Lease
		err error
	}
	res := make(chan result, 1)
	// A slot of m.starts until the Acquire returns or 20 ms pass: a
	// member that gains thousands of shards at once writes their records
	// at a pace its session's renewals keep up with.
	if err := w.start(ctx); err != nil {
		return nil, "", err
	}
	slot := time.NewTimer(20 * time.Millisecond)
	defer slot.Stop()
	held := true
	free := func() {
		if held {
			held = false
			<-w.m.starts
		}
	}
	defer free()
	go func() {
		l, err := w.m.g.locks.Acquire(ctx, w.m.g.lock(w.i), lease.WithMetadata(w.m.name))
		res <- result{l, err}
	}()
	var a asking
	t := time.NewTimer(w.firstAsk())
	defer t.Stop()
	for {
		select {
		case r := <-res:
			cause = "free"
			if a.asked != 0 {
				cause = "handoff"
			}
			return r.l, cause, r.err
		case <-slot.C:
			free()
		case <-w.wake:
			if want, _, _ := w.view(); !want {
				cancel()
			}
		case <-t.C:
			t.Reset(w.ask(ctx, &a))
		}
	}
}

// start takes a slot of m.starts, waiting while the member should own
// the shard.
func (w *worker) start(ctx context.Context) error {
	for {
		select {
		case w.m.starts <- struct{}{}:
			return nil
		case <-w.wake:
			if want, _, _ := w.view(); !want {
				return context.Canceled
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// firstAsk returns when to ask the holder first: at once when the shard
// comes from another member; a shard that had no owner is most likely
// free, and the Acquire takes it without help (a dead owner's session
// must expire, which no ask speeds up).
func (w *worker) firstAsk() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.from == "" || w.from == w.m.name {
		return 500 * time.Millisecond
	}
	return 5 * time.Millisecond
}

// asking is what a waiting worker asked so far.
type asking struct {
	tries int   // reads that did not find the member's record queued yet
	asked int64 // the holder's fencing revision asked to let go, 0 for none
}

// ask asks the holder of the shard's lock to release it, once the
// member's own record waits in the queue (so that the release admits it
// at once, by the watch event of the holder's delete; after three reads
// 10 ms apart that do not show it, it asks anyway: the lock is then free
// for the record when it lands), and returns when to look again: a new
// holder is asked again. The holder releases only if its own view of the
// assignment gives the shard away too. An ask costs a admin.Admin.Inspect
// (one read, plus one per session in the queue) and a RequestRelease (a
// read and a transaction).
func (w *worker) ask(ctx context.Context, a *asking) time.Duration {
	select { // at most maxAsks at once, so that a big move does not flood etcd
	case w.m.asks <- struct{}{}:
		defer func() { <-w.m.asks }()
	case <-ctx.Done():
		return time.Second
	}
	lock := w.m.g.lock(w.i)
	st, err := w.m.g.ops.Inspect(ctx, lock)
	if err != nil || st.Holder == nil {
		return 250 * time.Millisecond
	}
	queued := false
	for _, r := range st.Waiters {
		queued = queued || r.Value == w.m.name
	}
	if !queued && a.tries < 3 {
		a.tries++
		return 10 * time.Millisecond
	}
	if rev := st.Holder.Fence.Revision; rev != a.asked {
		err := w.m.g.ops.RequestRelease(ctx, lock, rev)
		if err == nil {
			a.asked = rev
		}
		w.m.g.cfg.log.Debug("shard owner asked to let go", w.attrs(slog.String("owner", st.Holder.Value), slog.Bool("queued", queued), slog.Any("error", err))...)
	}
	return time.Second
}

// hold owns the shard under l until the lease ends, the member closes, or
// the assignment moves the shard away and the successor asks for it (or
// nobody is to own it, or the hand-off time passes without a successor):
// then it cancels the shard's context and releases the lock.
func (w *worker) hold(l *lease.Lease, cause string) {
	m := w.m
	_, _, since := w.view()
	m.g.met.wait.WithLabelValues(cause).Observe(time.Since(since).Seconds())
	sctx, scancel := context.WithCancelCause(context.Background())
	ctx, cancel := l.Context(sctx)
	tok := l.Fence()
	m.gained(w.shard(), tok)
	m.q.push(Event{Kind: Gained, Shard: w.shard(), Fence: tok, Context: ctx})
	m.g.cfg.log.Debug("shard gained", w.attrs(slog.Int64("fence", tok.Revision), slog.String("cause", cause))...)
	why := w.wait(l)
	m.g.cfg.log.Debug("shard given up", w.attrs(slog.Any("cause", why))...)
	scancel(why) // first: no successor can be admitted before this
	m.lost(w.shard())
	rctx, rcancel := context.WithTimeout(context.Background(), m.g.cfg.ttl)
	for try := 0; try < 3; try++ {
		err := l.Release(rctx)
		if err == nil || !errors.Is(err, lease.ErrOutcomeUnknown) {
			break
		}
	}
	rcancel()
	cancel()
	m.q.push(Event{Kind: Lost, Shard: w.shard(), Fence: tok, Context: ctx, Err: why})
}

// wait waits until the shard must be given up, and returns why.
func (w *worker) wait(l *lease.Lease) error {
	requested := l.ReleaseRequested()
	asked := false
	var timer *time.Timer
	var timeout <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if want, to, since := w.view(); !want {
			left := w.m.g.cfg.handoff - time.Since(since)
			if asked || to == "" || left <= 0 {
				return ErrMoved
			}
			if timer == nil {
				timer = time.NewTimer(left)
				timeout = timer.C
			}
		} else if timer != nil {
			timer.Stop()
			timer, timeout = nil, nil
		}
		select {
		case <-l.Done():
			return l.Err()
		case <-requested:
			asked, requested = true, nil
		case <-w.wake:
		case <-timeout:
			timer, timeout = nil, nil
		case <-w.m.ctx.Done():
			return ErrLeft
		}
	}
}
