package watchmux

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// mux carries all of a Set's watches on one gRPC Watch stream of the
// Client's etcd connection, opened by the package itself rather than
// through clientv3's Watcher: a clientv3 watch runs goroutines and
// channels of its own (about 4.5 KiB of heap each), while a watch here is
// a Watch in two maps, so a Client that holds ten thousand locks watches
// each of their keys for a few hundred bytes apiece and receives the
// changes of those keys only.
//
// One goroutine (run) opens the stream and reads it, delivering events to
// the sink without holding mu; one goroutine per opened stream (send)
// writes the requests queued in out. A lost stream (an error, a member
// that lost its leader: the stream requires one, or a restart) is opened
// again, and every watch resumes from the revision after the last event it
// delivered; a watch whose next events were compacted away reads its keys
// instead (resync) and resumes after that read.
//
// etcd answers the create requests of a stream in the order it got them,
// each with a created response (with the id asked for, or -1 when it
// refused the watch), before any event of that watch; creating holds the
// watches whose answer is due, in that order. Each create asks for a new
// id, never used before on the stream.
type mux struct {
	etcd  *clientv3.Client
	ctx   context.Context // the owner's lifetime
	spawn func(func())
	sleep func(time.Duration) bool
	log   *slog.Logger
	sink  Sink
	ttl   time.Duration // bounds a resync's read
	stats Stats

	mu       sync.Locker
	closed   bool               // the owner closed: no more watches
	byID     map[int64]*Watch   // id of the live create -> watch
	creating []*Watch           // created responses due, in order
	out      []*pb.WatchRequest // requests to send on the current stream
	wake     chan struct{}      // tells send that out has requests (capacity 1)
	up       bool               // a stream is open; requests queue in out
	lastID   int64
	live     int // watches started and not stopped
}

// Config is what a Set needs from its owner.
type Config struct {
	Etcd    *clientv3.Client         // whose connection carries the stream
	Context context.Context          // the owner's lifetime: once it ends, the stream closes and no watch starts
	Go      func(func())             // runs a goroutine that the owner waits for when it closes
	Sleep   func(time.Duration) bool // waits, and reports false if Context ended first
	Log     *slog.Logger             // the stream's losses (Debug) and refused watches (Warn)
	TTL     time.Duration            // bounds a resync's read; an own key's watch lingers this long unused
	Sink    Sink                     // receives the events
	Stats   Stats                    // counts events and watches
	Used    func(key string) bool    // whether the sink still needs key's events; Sweep calls it under the owner's lock
	Mu      sync.Locker              // the stream's lock: taken under the owner's, never held while calling the sink
}

// New returns an empty Set whose stream runs until cfg.Context ends.
func New(cfg Config) *Set {
	s := &mux{etcd: cfg.Etcd, ctx: cfg.Context, spawn: cfg.Go, sleep: cfg.Sleep, log: cfg.Log, sink: cfg.Sink, ttl: cfg.TTL,
		stats: cfg.Stats, mu: cfg.Mu, byID: map[int64]*Watch{}, wake: make(chan struct{}, 1)}
	s.spawn(s.run)
	return &Set{stream: s, ttl: cfg.TTL, used: cfg.Used, m: map[string]*Watch{}}
}

// add starts kw, a new watch, from the current revision.
func (s *mux) add(kw *Watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		kw.stopped = true
		kw.confirm(math.MaxInt64) // nobody may rely on it
		return
	}
	s.live++
	s.stats.Watching(1)
	s.create(kw)
}

// closedChan is the channel created returns for a confirmed watch.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// created returns a channel closed once kw is confirmed: etcd confirmed
// it, or it stopped unconfirmed (start MaxInt64). A watch allocates one
// only while someone waits for it unconfirmed.
func (s *mux) created(kw *Watch) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kw.confirmed {
		return closedChan
	}
	if kw.waitc == nil {
		kw.waitc = make(chan struct{})
	}
	return kw.waitc
}

// stop ends kw. A watch stopped before etcd confirmed it closes created
// with start MaxInt64: whoever waits for it must read again.
func (s *mux) stop(kw *Watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kw.stopped {
		return
	}
	kw.stopped = true
	kw.confirm(math.MaxInt64)
	if s.closed {
		return // shutdown counted it
	}
	s.live--
	s.stats.Watching(-1)
	if kw.id != 0 {
		delete(s.byID, kw.id)
		s.queue(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
			CancelRequest: &pb.WatchCancelRequest{WatchId: kw.id}}})
		kw.id = 0
	}
}

// create asks etcd for kw's watch under a new id, from kw.next (from now
// while it is 0), if a stream is open; a stream opened later asks for it
// anyway. s.mu is held.
func (s *mux) create(kw *Watch) {
	s.lastID++
	kw.id = s.lastID
	s.byID[kw.id] = kw
	if !s.up {
		return
	}
	req := &pb.WatchCreateRequest{Key: []byte(kw.key), StartRevision: kw.next, WatchId: kw.id}
	if kw.prefix {
		req.RangeEnd = []byte(clientv3.GetPrefixRangeEnd(kw.key))
	}
	s.creating = append(s.creating, kw)
	s.queue(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}})
}

// queue adds req to the requests for send. s.mu is held.
func (s *mux) queue(req *pb.WatchRequest) {
	if !s.up {
		return
	}
	s.out = append(s.out, req)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run opens the stream, again whenever it is lost, until the Client
// closes.
func (s *mux) run() {
	defer s.shutdown()
	backoff := 20 * time.Millisecond
	for s.ctx.Err() == nil {
		if s.follow() {
			backoff = 20 * time.Millisecond
		} else {
			backoff = min(2*backoff, time.Second)
		}
		if !s.sleep(backoff) {
			return
		}
	}
}

// shutdown confirms, as unusable, every watch etcd never confirmed, once
// the owner closed.
func (s *mux) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.up = true, false
	s.stats.Watching(-s.live)
	s.live = 0
	for _, kw := range s.byID {
		kw.confirm(math.MaxInt64)
	}
}

// follow opens one stream, asks it for every watch and delivers what it
// answers until it fails. It reports whether the stream delivered
// anything.
func (s *mux) follow() (delivered bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	conn := s.etcd.ActiveConnection()
	if conn == nil {
		return false
	}
	stream, err := pb.NewWatchClient(conn).Watch(ctx, grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err != nil {
		return false
	}
	s.open()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if err := s.send(ctx, stream); err != nil {
			cancel() // Recv fails too
		}
	}()
	defer func() {
		cancel()
		<-sent
		s.lost()
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Debug("lease watch stream lost", slog.String("error", err.Error()))
			}
			return delivered
		}
		delivered = true
		if !s.handle(resp) {
			return delivered // open another stream, with a fresh auth token
		}
	}
}

// open starts a stream's requests: a create of every watch, each from
// the revision after the last event it delivered (or from now, if etcd
// never confirmed it).
func (s *mux) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = true
	s.out, s.creating = nil, nil
	old := s.byID
	s.byID = make(map[int64]*Watch, len(old))
	for _, kw := range old {
		if !kw.resyncing {
			s.create(kw)
		} else {
			s.byID[kw.id] = kw
		}
	}
}

// lost ends a stream's requests; the next stream asks for every watch
// again.
func (s *mux) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = false
	s.out, s.creating = nil, nil
}

// send writes the queued requests on stream until ctx ends or a write
// fails.
func (s *mux) send(ctx context.Context, stream pb.Watch_WatchClient) error {
	for {
		s.mu.Lock()
		reqs := s.out
		s.out = nil
		s.mu.Unlock()
		for _, req := range reqs {
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
	}
}

// handle applies one response of the stream. It reports false when the
// stream must be opened again.
func (s *mux) handle(resp *pb.WatchResponse) bool {
	if resp.Created {
		return s.answered(resp)
	}
	s.mu.Lock()
	kw := s.byID[resp.WatchId]
	if kw == nil || kw.resyncing { // stopped, or a cancel's answer
		s.mu.Unlock()
		return true
	}
	if resp.Canceled {
		s.canceled(kw, resp)
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	s.deliver(kw, resp.Events)
	return true
}

// answered applies etcd's answer to the oldest create it had not
// answered. It reports false when etcd refused it for a stale auth token,
// which only a new stream refreshes.
func (s *mux) answered(resp *pb.WatchResponse) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.creating) == 0 {
		return true
	}
	kw := s.creating[0]
	s.creating = s.creating[1:]
	if kw.stopped || s.byID[kw.id] != kw {
		return true
	}
	if resp.Canceled || resp.WatchId != kw.id {
		// Refused: etcd gives the reason in text only.
		s.log.Warn("lease watch failed", slog.String("error", resp.CancelReason))
		switch resp.CancelReason {
		case rpctypes.ErrGRPCInvalidAuthToken.Error(), rpctypes.ErrGRPCAuthOldRevision.Error():
			return false
		}
		s.retry(kw) // ask again, later
		return true
	}
	if kw.next == 0 {
		kw.next = resp.Header.Revision + 1
		kw.confirm(resp.Header.Revision)
	}
	return true
}

// canceled applies etcd's end of kw's watch: events compacted away
// (resync them) or another reason (ask again, later). s.mu is held.
func (s *mux) canceled(kw *Watch, resp *pb.WatchResponse) {
	// A compacted watch stays registered in etcd: cancel it; it is asked
	// for again under a new id. Meanwhile it stays in byID, marked, so
	// that a new stream leaves it to the resync or retry.
	s.queue(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
		CancelRequest: &pb.WatchCancelRequest{WatchId: kw.id}}})
	if resp.CompactRevision == 0 {
		s.log.Warn("lease watch failed", slog.String("error", resp.CancelReason))
		s.retry(kw)
		return
	}
	kw.resyncing = true
	s.spawn(func() { s.resync(kw) })
}

// retry asks for kw's watch again after a while. s.mu is held.
func (s *mux) retry(kw *Watch) {
	kw.resyncing = true // not asked for by a new stream meanwhile
	s.spawn(func() {
		if !s.sleep(time.Second) {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.restart(kw, kw.next)
	})
}

// restart asks for kw's watch again, from rev. s.mu is held.
func (s *mux) restart(kw *Watch, rev int64) {
	if kw.stopped || s.closed || s.byID[kw.id] != kw {
		return
	}
	delete(s.byID, kw.id)
	kw.resyncing, kw.next = false, rev
	s.create(kw)
}

// deliver hands kw's events to the sink, in revision order, and moves
// kw's resume revision past them.
func (s *mux) deliver(kw *Watch, evs []*mvccpb.Event) {
	if len(evs) == 0 {
		return
	}
	s.stats.Events(len(evs))
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			s.sink.Deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
		} else {
			s.sink.Put(ev.Kv)
		}
	}
	s.mu.Lock()
	kw.next = evs[len(evs)-1].Kv.ModRevision + 1
	s.mu.Unlock()
}

// resync reads, after the events of kw were compacted away, every key kw
// covers, hands the read to the sink, and resumes kw's watch after the
// read; until a read succeeds, it tries again.
func (s *mux) resync(kw *Watch) {
	for {
		s.mu.Lock()
		stopped := kw.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		if at, ok := s.read(kw); ok {
			s.mu.Lock()
			s.restart(kw, at+1)
			s.mu.Unlock()
			return
		}
		if !s.sleep(100 * time.Millisecond) {
			return
		}
	}
}

// read reads every key kw covers and hands the read to the sink. It
// returns the revision read at.
func (s *mux) read(kw *Watch) (int64, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, s.ttl)
	defer cancel()
	var opts []clientv3.OpOption
	if kw.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := s.etcd.Get(ctx, kw.key, opts...)
	if err != nil {
		return 0, false
	}
	present := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv
	}
	if !s.sink.Resync(kw.Covers, present, resp.Header.Revision) {
		return 0, false
	}
	return resp.Header.Revision, true
}
