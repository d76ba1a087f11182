package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 256

// Client acquires leases on etcd. It owns one etcd session lease, kept alive
// in the background, to which the records of all its leases are attached;
// it is created on the first Acquire and again after it is lost.
//
// A Client is safe for concurrent use. Close it when done: Close revokes
// the session, which ends every lease the Client holds.
type Client struct {
	etcd   *clientv3.Client
	cfg    config
	src    *owner.Source
	log    *slog.Logger
	met    *metrics
	ctx    context.Context // the Client's lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sessMu sync.Mutex // serialises session creation

	mu       sync.Mutex
	closed   bool
	watching bool
	sess     *session
	held     map[string]*Lease  // record key -> lease
	waiters  map[string]*waiter // own record key -> waiter
	byDir    map[string]map[*waiter]struct{}
	orphans  map[string]orphan // record key -> record to delete
}

// orphan is a record whose acquisition failed after it may have been
// written; it is deleted (owner-checked) in the background.
type orphan struct {
	value string
	sess  *session
}

// New returns a Client that keeps its records in etcd through cli. New does
// no I/O: the session is granted by the first Acquire. The caller keeps
// ownership of cli and closes it after the Client.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, errors.New("lease: nil etcd client")
	}
	cfg := config{prefix: DefaultPrefix, ttl: DefaultTTL}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("lease: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.margin == 0 {
		cfg.margin = max(cfg.ttl/10, 50*time.Millisecond)
	}
	if cfg.margin*2 >= cfg.ttl {
		return nil, fmt.Errorf("lease: safety margin %v is not less than half the TTL %v", cfg.margin, cfg.ttl)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	src := owner.Default()
	if cfg.instance != "" {
		var err error
		if src, err = owner.NewSource(cfg.instance, owner.ProcessStart()); err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
	}
	met := newMetrics()
	if cfg.registerer != nil {
		if err := met.register(cfg.registerer); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		met:     met,
		etcd:    cli,
		cfg:     cfg,
		src:     src,
		log:     cfg.logger,
		ctx:     ctx,
		cancel:  cancel,
		held:    map[string]*Lease{},
		waiters: map[string]*waiter{},
		byDir:   map[string]map[*waiter]struct{}{},
		orphans: map[string]orphan{},
	}, nil
}

// ValidateName returns nil for a usable lock name, and an error matching
// ErrInvalidName otherwise: names are 1 to MaxNameLen bytes of UTF-8 with
// no "/" and no control characters (C0, DEL and C1).
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidName)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: %q contains \"/\"", ErrInvalidName, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidName, name)
		}
	}
	return nil
}

// Close ends every lease and wait of the Client and revokes its session,
// which deletes every record it holds in one request, bounded by the TTL.
// Leases end with ErrClosed; waiting Acquire calls return ErrClosed. Close
// waits for the Client's goroutines to exit. Later calls return nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.sess
	c.mu.Unlock()
	var err error
	if s != nil {
		c.endSession(s, ErrClosed)
		err = c.revoke(s)
	}
	c.cancel()
	c.wg.Wait()
	return err
}

// revoke revokes s, bounded by the TTL.
func (c *Client) revoke(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	_, err := c.etcd.Revoke(ctx, s.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lease: revoke session: %w", err)
	}
	return nil
}

// session returns the live session, granting one if there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	if s, err := c.liveSession(); s != nil || err != nil {
		return s, err
	}
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if s, err := c.liveSession(); s != nil || err != nil {
		return s, err
	}
	if err := c.startWatch(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := c.etcd.Grant(ctx, int64(c.cfg.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("lease: grant session: %w", errors.Join(rpcError(err), ctx.Err()))
	}
	ttl := time.Duration(resp.TTL) * time.Second
	if ttl != c.cfg.ttl {
		// etcd raises a TTL below its minimum without saying so; a holder
		// would then block others longer than configured.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		_, _ = c.etcd.Revoke(rctx, resp.ID)
		cancel()
		return nil, fmt.Errorf("%w: asked for %v, etcd granted %v (its minimum is 1.5 election timeouts)", ErrTTLTooShort, c.cfg.ttl, ttl)
	}
	s := &session{
		id:         resp.ID,
		ttl:        ttl,
		margin:     min(c.cfg.margin, ttl/2),
		done:       make(chan struct{}),
		validUntil: sent.Add(ttl - min(c.cfg.margin, ttl/2)),
		slots:      map[string]struct{}{},
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = c.revoke(s)
		return nil, ErrClosed
	}
	c.sess = s
	s.timer = time.AfterFunc(time.Until(s.validUntil), func() { c.onDeadline(s) })
	c.wg.Add(1)
	c.mu.Unlock()
	go c.keepAlive(s)
	c.log.Debug("lease session granted", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.Duration("ttl", ttl))
	return s, nil
}

func (c *Client) liveSession() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.sess, nil
}

// session is one etcd lease of a Client. Its mutable fields are guarded by
// Client.mu.
type session struct {
	id         clientv3.LeaseID
	ttl        time.Duration
	margin     time.Duration
	done       chan struct{}
	err        error
	validUntil time.Time
	timer      *time.Timer
	slots      map[string]struct{} // record keys in use (see claimSlot)
}

// claimSlot returns the record key for a new acquisition of the lock whose
// records live under dir: <dir><session id>-<slot>, with the lowest slot
// this session is not using. Reusing keys, rather than writing a new one per
// acquisition, keeps etcd's key index for the lock from growing with every
// acquisition until the next compaction (each read of the queue would scan
// it). A key is freed only once its record is known to be gone.
func (c *Client) claimSlot(s *session, dir string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s%016x-%x", dir, int64(s.id), i)
		if _, used := s.slots[key]; !used {
			s.slots[key] = struct{}{}
			return key
		}
	}
}

// freeSlot lets a later acquisition reuse key: its record is gone.
func (c *Client) freeSlot(s *session, key string) {
	c.mu.Lock()
	delete(s.slots, key)
	c.mu.Unlock()
}

// keepAlive renews s every third of its TTL and extends its validity from
// the time each renewal was sent, until s ends.
func (c *Client) keepAlive(s *session) {
	defer c.wg.Done()
	interval := s.ttl / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.done:
			return
		case <-c.ctx.Done():
			return
		}
		c.mu.Lock()
		until := s.validUntil
		c.mu.Unlock()
		sent := time.Now()
		if floor := sent.Add(interval); until.Before(floor) {
			until = floor
		}
		ctx, cancel := context.WithDeadline(c.ctx, until)
		resp, err := c.etcd.KeepAliveOnce(ctx, s.id)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			c.endSession(s, ErrSessionExpired)
			return
		case errors.Is(rpcError(err), ErrPermissionDenied):
			// etcd refuses to renew a lease when the user may not write
			// every key attached to it; the session is as good as gone.
			c.endSession(s, fmt.Errorf("%w: renewal refused: %w", ErrSessionExpired, rpcError(err)))
			return
		case err != nil:
			if c.ctx.Err() != nil {
				return
			}
			c.log.Warn("lease session renewal failed", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.String("error", err.Error()))
			t.Reset(max(interval/4, 20*time.Millisecond))
		default:
			c.extend(s, sent.Add(time.Duration(resp.TTL)*time.Second-s.margin))
			t.Reset(interval)
		}
		c.deleteOrphans(s)
	}
}

// extend moves s's validity deadline forward to until.
func (c *Client) extend(s *session, until time.Time) {
	c.mu.Lock()
	if s.err == nil && until.After(s.validUntil) {
		s.validUntil = until
	}
	c.mu.Unlock()
}

// onDeadline runs when s's validity timer fires: it ends s unless a renewal
// moved the deadline meanwhile, in which case it re-arms the timer.
func (c *Client) onDeadline(s *session) {
	c.mu.Lock()
	if s.err != nil {
		c.mu.Unlock()
		return
	}
	if d := time.Until(s.validUntil); d > 0 {
		s.timer.Reset(d)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if !c.endSession(s, ErrDeadline) {
		return
	}
	// The server may still hold the session; give up its records now rather
	// than when it expires, so the next holder does not wait for the TTL.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // Close revokes it
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := c.revoke(s); err != nil {
			c.log.Warn("lease session revoke after deadline failed", slog.String("error", err.Error()))
		}
	}()
}

// endSession ends s with cause and every lease attached to it, and reports
// whether this call ended it. Waiters on s notice through s.done.
func (c *Client) endSession(s *session, cause error) bool {
	c.mu.Lock()
	if s.err != nil {
		c.mu.Unlock()
		return false
	}
	s.err = cause
	close(s.done)
	if s.timer != nil {
		s.timer.Stop()
	}
	if c.sess == s {
		c.sess = nil
	}
	var lost []*Lease
	for k, l := range c.held {
		if l.sess == s {
			delete(c.held, k)
			lost = append(lost, l)
		}
	}
	for k, o := range c.orphans {
		if o.sess == s {
			delete(c.orphans, k) // the record dies with the session
		}
	}
	c.mu.Unlock()
	for _, l := range lost {
		if cause == ErrClosed {
			l.end(ErrClosed)
		} else {
			l.end(&LostError{Fence: l.Fence(), Cause: cause})
		}
	}
	if cause != ErrClosed {
		c.log.Warn("lease session ended", slog.String("session", strconv.FormatInt(int64(s.id), 16)),
			slog.String("cause", cause.Error()), slog.Int("leases_lost", len(lost)))
	}
	return true
}

// startWatch starts the Client's one watch of its whole prefix, from the
// current revision, before any record of this Client can exist.
func (c *Client) startWatch(ctx context.Context) error {
	c.mu.Lock()
	watching := c.watching
	c.mu.Unlock()
	if watching {
		return nil
	}
	resp, err := c.etcd.Get(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("lease: read revision: %w", errors.Join(rpcError(err), ctx.Err()))
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.watching = true
	c.wg.Add(1)
	c.mu.Unlock()
	go c.watch(resp.Header.Revision + 1)
	return nil
}

// watch follows every change under the prefix from rev on: it ends leases
// whose records were deleted or overwritten and wakes waiters whose
// predecessor left. Watching from a revision not yet in the past keeps the
// watcher "synced" in etcd, so events arrive in about a millisecond.
func (c *Client) watch(rev int64) {
	defer c.wg.Done()
	backoff := 20 * time.Millisecond
	for c.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
		wch := c.etcd.Watch(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		resync := false
		for resp := range wch {
			if resp.CompactRevision != 0 {
				resync = true
				break
			}
			if err := resp.Err(); err != nil {
				// etcd cancels a watch the user may not read with a
				// reason in text only; say so, and back off.
				c.log.Warn("lease watch failed", slog.String("error", err.Error()), slog.String("reason", resp.CancelReason))
				backoff = min(2*backoff, time.Second)
				break
			}
			backoff = 20 * time.Millisecond
			for _, ev := range resp.Events {
				c.dispatch(ev)
				rev = ev.Kv.ModRevision + 1
			}
		}
		cancel()
		if c.ctx.Err() != nil {
			return
		}
		if resync {
			if r, ok := c.resync(); ok {
				rev = r
			}
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// resync runs after events were compacted away: it checks every held
// record and wakes every waiter to re-read its queue. It returns the
// revision to watch from.
func (c *Client) resync() (int64, bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ttl)
	defer cancel()
	resp, err := c.etcd.Get(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, false
	}
	present := map[string]int64{}
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv.CreateRevision
	}
	c.mu.Lock()
	var lost []*Lease
	for k, l := range c.held {
		if present[k] != l.rev && !l.releasing {
			delete(c.held, k)
			lost = append(lost, l)
		}
	}
	for _, ws := range c.byDir {
		for w := range ws {
			w.wake()
		}
	}
	c.mu.Unlock()
	for _, l := range lost {
		l.end(&LostError{Fence: l.Fence(), Cause: ErrKeyDeleted})
	}
	return resp.Header.Revision + 1, true
}

// dispatch applies one watch event to held leases and waiters.
func (c *Client) dispatch(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	c.mu.Lock()
	var (
		lost  *Lease
		cause error
	)
	// Keys are reused, so an event may be about an earlier record under
	// the same key: only events after a record's creation concern it.
	rev := ev.Kv.ModRevision
	switch ev.Type {
	case mvccpb.DELETE:
		if l := c.held[key]; l != nil && rev > l.rev {
			if l.releasing {
				l.sawDelete = true
			} else {
				delete(c.held, key)
				delete(l.sess.slots, key)
				lost, cause = l, ErrKeyDeleted
			}
		}
		for w := range c.byDir[dirOf(key)] {
			w.onDelete(key, rev)
		}
	case mvccpb.PUT:
		tok, _, ok := decodeValue(ev.Kv.Value)
		if l := c.held[key]; l != nil && !l.releasing && rev > l.rev {
			if ev.Kv.CreateRevision != l.rev || !ok || tok != l.owner.Value() {
				delete(c.held, key)
				lost, cause = l, ErrKeyOverwritten
			}
		}
		if w := c.waiters[key]; w != nil {
			w.onPut(rev, ok && tok == w.owner)
		}
	}
	c.mu.Unlock()
	if lost != nil {
		lost.end(&LostError{Fence: lost.Fence(), Cause: cause})
	}
}

func dirOf(key string) string {
	return key[:strings.LastIndexByte(key, '/')+1]
}

// encodeValue is the stored value of a lock record: the owner token and the
// hold count.
func encodeValue(tok string, count int) string {
	return tok + "#" + strconv.Itoa(count)
}

func decodeValue(v []byte) (tok string, count int, ok bool) {
	s := string(v)
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return s[:i], n, true
}

// deleteOrphans deletes records left by acquisitions that failed after
// their write may have applied. Each delete compares the record's value,
// which holds that acquisition's unique owner token.
func (c *Client) deleteOrphans(s *session) {
	c.mu.Lock()
	var keys, vals []string
	for k, o := range c.orphans {
		if o.sess == s {
			keys = append(keys, k)
			vals = append(vals, o.value)
		}
	}
	c.mu.Unlock()
	for i, k := range keys {
		ctx, cancel := context.WithTimeout(c.ctx, s.ttl/3)
		_, err := c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", vals[i])).Then(clientv3.OpDelete(k)).Commit()
		cancel()
		if err == nil {
			c.mu.Lock()
			delete(c.orphans, k)
			delete(s.slots, k)
			c.mu.Unlock()
		}
	}
}

// abandon removes the record of a failed acquisition, or leaves it to the
// background when that is not possible now.
func (c *Client) abandon(ctx context.Context, s *session, key, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl/3)
	defer cancel()
	resp, err := c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", value)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err == nil {
		// Deleted, or never written; unless someone else's record holds
		// the key now, it may be reused.
		if resp.Succeeded || len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			c.freeSlot(s, key)
		}
		return
	}
	c.mu.Lock()
	if s.err == nil {
		c.orphans[key] = orphan{value: value, sess: s}
	}
	c.mu.Unlock()
	c.log.Warn("lease waiter record left for background cleanup", logattr.Lock(dirName(key)), slog.String("error", err.Error()))
}

// dirName returns the lock name of a record key.
func dirName(key string) string {
	d := strings.TrimSuffix(dirOf(key), "/")
	return d[strings.LastIndexByte(d, '/')+1:]
}
