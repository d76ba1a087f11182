//go:build unix

package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	_ "modernc.org/sqlite"
)

// Worker timing. The lease TTL is etcd's minimum with 10 ms ticks; think
// time is a good part of it, so that a fault that ends a lease often lands
// between a holder's read and its write.
const (
	leaseTTL      = time.Second
	minThink      = 5 * time.Millisecond
	maxThink      = 150 * time.Millisecond
	maxCycles     = 3 // read-modify-write cycles per acquisition
	acquireWait   = 5 * time.Second
	requestWait   = 3 * time.Second
	releaseWait   = time.Second
	maxAttempts   = 4 // of a Release or Reenter whose outcome is unknown
	reenterOdds   = 4 // one acquisition in reenterOdds reenters once
	workerName    = "safety"
	envWorkerConf = "FENCEKIT_SAFETY_WORKER"
)

// lineSpec tells a worker how to reach one resource in one mode. It
// travels to worker processes as JSON.
//
// A line has Shards independent shards: shard i has its own lock (Lock
// followed by "-i") and its own resource (the register at URL followed by
// "/i", the SQL row Resource followed by "-i"), and every worker runs a
// loop per shard.
type lineSpec struct {
	Workload string `json:"workload"`
	Guarded  bool   `json:"guarded"`
	Lock     string `json:"lock"`
	Shards   int    `json:"shards"`
	// register
	URL string `json:"url,omitempty"`
	// sql
	Driver   string           `json:"driver,omitempty"`
	DSN      string           `json:"dsn,omitempty"`
	Dialect  sqlguard.Dialect `json:"dialect,omitempty"`
	Tables   sqlTables        `json:"tables"`
	Resource string           `json:"resource,omitempty"`
}

// lockName is the name of shard's lock.
func (s lineSpec) lockName(shard int) string { return s.Lock + "-" + strconv.Itoa(shard) }

// resource is the SQL resource of shard.
func (s lineSpec) resource(shard int) string { return s.Resource + "-" + strconv.Itoa(shard) }

func (s lineSpec) mode() string {
	if s.Guarded {
		return "guarded"
	}
	return "unguarded"
}

// workerConfig is everything one worker needs.
type workerConfig struct {
	ID        int        `json:"id"`
	Endpoints []string   `json:"endpoints"`
	Lines     []lineSpec `json:"lines"`
	// ElemBase makes the elements this worker adds unique in the run.
	ElemBase int64 `json:"elemBase"`
}

// event is one thing a worker did, reported to the recorder (as a JSON
// line on stdout, from a worker process).
type event struct {
	Worker int       `json:"w"`
	Line   int       `json:"l"`
	Shard  int       `json:"s"`
	Kind   string    `json:"k"`
	Elem   int64     `json:"e,omitempty"`
	Op     *check.Op `json:"o,omitempty"` // evHist
	Msg    string    `json:"m,omitempty"` // evBad
	// Tok and At: the lease's fencing token and the wall-clock time
	// (Unix nanoseconds) of evAcquired and evSignal.
	Tok int64 `json:"r,omitempty"`
	At  int64 `json:"t,omitempty"`
	// Until and Asked, of evAcquired: the lease's validity deadline
	// (ValidUntil) and when its Acquire was called (Unix nanoseconds).
	Until int64 `json:"u,omitempty"`
	Asked int64 `json:"a,omitempty"`
}

// Event kinds.
const (
	evAcquired = "acq"  // the worker holds the line's lock
	evEnded    = "end"  // the worker no longer holds it
	evOp       = "op"   // a read-modify-write cycle started
	evAck      = "ack"  // its write was acknowledged (Elem added)
	evRejected = "rej"  // the resource refused its token
	evFailed   = "fail" // it failed otherwise, or its outcome is unknown
	evLate     = "late" // its write was delayed by the slow-writer fault
	evHist     = "h"    // one operation on the resource, for porcupine
	evUnknown  = "unk"  // a Release or Reenter whose outcome was unknown
	evBetween  = "mid"  // another call on the lease before retrying it
	evResolved = "res"  // a retried Release or Reenter settled
	evBad      = "bad"  // an error outside lease's documented set
	evLostRace = "race" // released (nil), but the lease ended as lost on its own
	// evSignal: the holder learned its hold is over: it began to release
	// (Msg "release") or the lease's Done closed (Msg: the cause).
	evSignal = "sig"
)

// Refusals by the resource's fence: errStale and errUnverified match
// errRejected.
var (
	errRejected   = errors.New("rejected by the fence")
	errStale      = fmt.Errorf("%w: stale token", errRejected)
	errUnverified = fmt.Errorf("%w: token not verified", errRejected)
)

// resourceClient is a worker's handle on one line's resources, one per
// shard. It is safe for concurrent use.
type resourceClient interface {
	// claim runs once per acquisition, before the first read. It
	// reports whether it sent anything (false: nothing to record).
	claim(ctx context.Context, shard int, tok fence.Token) (bool, error)
	read(ctx context.Context, shard int, tok fence.Token) ([]int64, error)
	write(ctx context.Context, shard int, tok fence.Token, elems []int64, add int64) error
	// readKind is how porcupine should see a read: fenced or plain.
	readKind() check.OpKind
	close()
}

// envSafetyLog names a directory where, when set, every worker keeps its
// lease Client's debug log (worker-N.log) and the process profile keeps
// its etcd members' data and logs, to explain a failed run.
const envSafetyLog = "FENCEKIT_SAFETY_LOG"

// runWorker runs one worker until ctx ends: for every shard of every line,
// a loop that acquires the shard's lock and does read-modify-write cycles. slow, when
// not nil, delivers writes late while the slow-writer fault is injected.
func runWorker(ctx context.Context, cfg workerConfig, slow *faults.SlowWriter, emit func(event)) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	opts := []lease.Option{lease.WithTTL(leaseTTL)}
	if dir := os.Getenv(envSafetyLog); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", cfg.ID)))
		if err != nil {
			return err
		}
		defer f.Close()
		opts = append(opts, lease.WithLogger(slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	locks, err := lease.New(cli, opts...)
	if err != nil {
		return err
	}
	defer locks.Close()

	var clients []resourceClient
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for _, spec := range cfg.Lines {
		c, err := openResource(spec, locks.Verifier())
		if err != nil {
			return fmt.Errorf("%s/%s: %w", spec.Workload, spec.mode(), err)
		}
		clients = append(clients, c)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next = cfg.ElemBase
	)
	newElem := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		next++
		return next
	}
	for i, spec := range cfg.Lines {
		for shard := range spec.Shards {
			wg.Go(func() {
				w := &lineWorker{cfg: cfg, line: i, shard: shard, spec: spec, locks: locks, res: clients[i], slow: slow, emit: emit, newElem: newElem}
				w.loop(ctx)
			})
		}
	}
	wg.Wait()
	if slow != nil {
		slow.Wait() // late writes use the resource clients
	}
	return nil
}

type lineWorker struct {
	cfg     workerConfig
	line    int
	shard   int
	spec    lineSpec
	locks   *lease.Client
	res     resourceClient
	slow    *faults.SlowWriter
	emit    func(event)
	newElem func() int64
}

func (w *lineWorker) send(kind string, elem int64) {
	w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: kind, Elem: elem})
}

// record reports one operation on the resource, called at call, that
// ended with err, for the linearizability check.
func (w *lineWorker) record(kind check.OpKind, tok fence.Token, value int64, call time.Time, err error) {
	o := &check.Op{Client: w.cfg.ID, Kind: kind, Token: tok.Revision, Value: value,
		Call: call.UnixNano(), Return: time.Now().UnixNano(), Outcome: opOutcome(err)}
	if kind != check.OpWrite && o.Outcome != check.OK {
		o.Value = 0
	}
	w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evHist, Op: o})
}

// opOutcome maps a resource error to what the client learned.
func opOutcome(err error) check.Outcome {
	switch {
	case err == nil:
		return check.OK
	case errors.Is(err, errStale):
		return check.Stale
	case errors.Is(err, errUnverified):
		return check.Unverified
	}
	return check.Unknown
}

func (w *lineWorker) loop(ctx context.Context) {
	name := w.spec.lockName(w.shard)
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acquireWait)
		asked := time.Now().UnixNano()
		l, err := w.locks.Acquire(actx, name)
		timedOut := actx.Err() != nil
		cancel()
		if err != nil {
			// lease.ErrRetryable marks the errors worth retrying;
			// the others (bar our own time-out) are a broken promise
			// or a bad use, and are reported.
			if ctx.Err() == nil && !timedOut && !errors.Is(err, lease.ErrRetryable) {
				w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evBad, Msg: "acquire: " + err.Error()})
			}
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		tok := l.Fence().Revision
		w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evAcquired, Tok: tok, At: time.Now().UnixNano(),
			Until: l.ValidUntil().UnixNano(), Asked: asked})
		go w.watchEnd(ctx, l, tok)
		holds := 1
		if rand.IntN(reenterOdds) == 0 && w.settle(ctx, l, "reenter", l.Reenter) == nil {
			holds++
		}
		w.hold(ctx, l)
		w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evSignal, Tok: tok, At: time.Now().UnixNano(), Msg: "release"})
		for i := range holds {
			endedBefore := l.Err() != nil
			// Not owner / not found after a fault: expected, and the
			// lease has ended.
			if w.settle(ctx, l, "release", l.Release) != nil {
				break
			}
			if i == holds-1 {
				w.released(l, endedBefore)
			}
		}
		w.send(evEnded, 0)
		sleep(ctx, time.Duration(rand.IntN(30))*time.Millisecond)
	}
}

// watchEnd reports when l's Done closes, with the cause, until ctx ends.
func (w *lineWorker) watchEnd(ctx context.Context, l *lease.Lease, tok int64) {
	select {
	case <-l.Done():
	case <-ctx.Done():
		return
	}
	at := time.Now().UnixNano()
	cause := "other"
	if errors.Is(l.Err(), lease.ErrReleased) {
		cause = "released"
	}
	for _, c := range lossCauses {
		if errors.Is(l.Err(), c.err) {
			cause = c.name
			break
		}
	}
	w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evSignal, Tok: tok, At: at, Msg: cause})
}

// settle runs call (l's Release or Reenter) until its outcome is known,
// at most maxAttempts times. After an outcome matching
// lease.ErrOutcomeUnknown it sometimes makes another call on l first — a
// Renew, or a look at its state — as a careless caller would: the retry
// must still apply at most once (issue 20). It returns call's last error.
func (w *lineWorker) settle(ctx context.Context, l *lease.Lease, what string, call func(context.Context) error) error {
	var err error
	for attempt := range maxAttempts {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
		err = call(cctx)
		cancel()
		if attempt > 0 && !errors.Is(err, lease.ErrOutcomeUnknown) {
			w.send(evResolved, 0)
		}
		switch {
		case err == nil || errors.Is(err, lease.ErrNotOwner) || errors.Is(err, lease.ErrNotFound):
			return err
		case errors.Is(err, lease.ErrLost):
			// The lease had already ended (its *LostError): lease's
			// doc lists only the results above, but this one is
			// honest and exported.
			return err
		case !errors.Is(err, lease.ErrOutcomeUnknown):
			if !errors.Is(err, lease.ErrClosed) {
				w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evBad, Msg: what + ": " + err.Error()})
			}
			return err
		}
		w.send(evUnknown, 0)
		switch rand.IntN(3) {
		case 0:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
			_ = l.Renew(rctx) // its result changes nothing: the retry decides
			cancel()
			w.send(evBetween, 0)
		case 1:
			_, _ = l.Err(), l.Fence()
			w.send(evBetween, 0)
		}
	}
	return err
}

// releasedWait bounds the wait for Done after the last Release returned
// nil; it closes before Release returns.
const releasedWait = time.Second

// causeRevokedEarly names lease.ErrRevokedEarly: etcd ended the session
// before the TTL its last renewal granted ran out.
const causeRevokedEarly = "revoked-early"

// lossCauses names the causes of a lease's loss, for the counts (the
// first that matches: ErrRevokedEarly also matches ErrSessionExpired).
var lossCauses = []struct {
	err  error
	name string
}{
	{lease.ErrDeadline, "deadline"}, {lease.ErrRevokedEarly, causeRevokedEarly}, {lease.ErrSessionExpired, "session-expired"},
	{lease.ErrKeyDeleted, "key-deleted"}, {lease.ErrKeyOverwritten, "key-overwritten"},
	{lease.ErrNotOwner, "not-owner"}, {lease.ErrNotFound, "not-found"},
}

// released checks lease's promise for a last Release that returned nil,
// retried or not: the lease has ended, as released. A lease that ended
// because someone else deleted or overwrote its record fails the run
// (evBad): such a Release took another's delete for its own. A lease that
// ended as lost otherwise is reported (evLostRace, with the cause): lease
// ends a lease on its own at its local validity deadline or when its
// session ends, and may do so while the Release that deletes its record is
// on its way (the first end wins). None of these lets anyone else hold the
// lock early: the fencing checks above are the safety verdict.
//
// endedBefore says the lease had ended before the last Release was called
// (the worker releases it all the same); such a case is counted under its
// cause with the suffix "/ended-first", since that Release cannot have
// decided how the lease ended. lease once returned nil for a Release sent
// after its record was seen deleted, when a reply was lost on the way
// (lease's TestReleaseAfterLossWithLostReply); that is now a failure here.
func (w *lineWorker) released(l *lease.Lease, endedBefore bool) {
	t := time.NewTimer(releasedWait)
	defer t.Stop()
	cause := ""
	select {
	case <-l.Done():
		err := l.Err()
		if errors.Is(err, lease.ErrReleased) {
			return
		}
		cause = "other"
		for _, c := range lossCauses {
			if errors.Is(err, c.err) {
				cause = c.name
				break
			}
		}
	case <-t.C:
		cause = "not-ended"
	}
	if strings.HasPrefix(cause, "key-") {
		// Someone else removed or replaced the record, and the Release
		// still returned nil: that Release claimed a delete that was not
		// its own (fixed in lease; this catches it coming back).
		w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evBad,
			Msg: "last Release returned nil, but the lease ended lost: " + cause})
		return
	}
	if endedBefore {
		cause += "/ended-first"
	}
	w.emit(event{Worker: w.cfg.ID, Line: w.line, Shard: w.shard, Kind: evLostRace, Msg: cause})
}

// hold does up to maxCycles read-modify-write cycles under l. Like
// Jepsen's lock-set clients, it does not look at the lease between its
// read and its write: that gap is where a lease alone fails. It stops
// starting new cycles once the lease has ended.
func (w *lineWorker) hold(ctx context.Context, l *lease.Lease) {
	tok := l.Fence()
	req := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, requestWait)
	}
	rctx, cancel := req()
	call := time.Now()
	sent, err := w.res.claim(rctx, w.shard, tok)
	cancel()
	if sent {
		w.record(check.OpClaim, tok, 0, call, err)
	}
	if err != nil {
		w.send(outcome(err), 0)
		return
	}
	for range 1 + rand.IntN(maxCycles) {
		if l.Err() != nil || ctx.Err() != nil {
			return
		}
		w.send(evOp, 0)
		rctx, cancel := req()
		call := time.Now()
		elems, err := w.res.read(rctx, w.shard, tok)
		cancel()
		var last int64
		if len(elems) > 0 {
			last = elems[len(elems)-1]
		}
		w.record(w.res.readKind(), tok, last, call, err)
		if err != nil {
			w.send(outcome(err), 0)
			return
		}
		if !sleep(ctx, minThink+rand.N(maxThink-minThink)) {
			w.send(evFailed, 0)
			return
		}
		add := w.newElem()
		// The write does not use the lease's context: like a request
		// already on the wire, it goes on after the lease ends. A
		// late write (slow-writer fault) runs after this worker gave
		// up, so it gets a context of its own; it is recorded when it
		// is actually sent.
		write := func(ctx context.Context) func() error {
			return func() error {
				ctx, cancel := context.WithTimeout(ctx, requestWait)
				defer cancel()
				call := time.Now()
				err := w.res.write(ctx, w.shard, tok, append(slices.Clone(elems), add), add)
				w.record(check.OpWrite, tok, add, call, err)
				return err
			}
		}
		if w.slow != nil {
			err = w.slow.Write(write(context.WithoutCancel(ctx)))
		} else {
			err = write(ctx)()
		}
		switch {
		case errors.Is(err, faults.ErrLate):
			w.send(evLate, 0)
			return
		case err != nil:
			w.send(outcome(err), 0)
			return
		}
		w.send(evAck, add)
	}
}

// outcome maps a resource error to an event kind.
func outcome(err error) string {
	if errors.Is(err, errRejected) {
		return evRejected
	}
	return evFailed
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// openResource opens a line's resource; v verifies the tokens of a
// guarded SQL line.
func openResource(spec lineSpec, v sqlguard.Verifier) (resourceClient, error) {
	switch spec.Workload {
	case "register":
		return newRegisterClient(spec), nil
	default:
		return openSQLClient(spec, v)
	}
}

// runProcessWorker is the body of a worker process: its configuration
// comes from the environment, its events go to stdout as JSON lines.
func runProcessWorker(ctx context.Context) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(envWorkerConf)), &cfg); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	return runWorker(ctx, cfg, nil, func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	})
}

// ---- register: an in-memory set behind guard's HTTP middleware ----

// register is the server side of one shard of a register line: a set of
// elements, and the history of the writes it applied.
type register struct {
	mu      sync.Mutex
	elems   []int64
	history []check.Write
}

type registerBody struct {
	Elems []int64 `json:"elems"`
	Add   int64   `json:"add"`
}

// ServeHTTP reads the set (GET) or replaces it (PUT), recording the
// token of every write. It does not check tokens: in guarded mode the
// middleware in front of it does.
func (r *register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodGet:
		r.mu.Lock()
		body := registerBody{Elems: slices.Clone(r.elems)}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	case http.MethodPut:
		tok, err := guard.TokenFromHeader(req.Header)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var body registerBody
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.elems = body.Elems
		r.history = append(r.history, check.Write{Token: tok.Revision, Elem: body.Add})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (r *register) snapshot() (history []check.Write, final []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history), slices.Clone(r.elems)
}

// registerClient reaches a register over HTTP, sending the token in the
// Fencing-Token header (guard.Transport) in both modes.
type registerClient struct {
	url string
	tr  *http.Transport
	cli *http.Client
}

func newRegisterClient(spec lineSpec) *registerClient {
	tr := &http.Transport{}
	return &registerClient{url: spec.URL, tr: tr, cli: &http.Client{Transport: &guard.Transport{Base: tr}}}
}

func (c *registerClient) claim(context.Context, int, fence.Token) (bool, error) { return false, nil }

func (c *registerClient) readKind() check.OpKind { return check.OpRead }

func (c *registerClient) do(ctx context.Context, shard int, tok fence.Token, method string, body io.Reader) (*http.Response, error) {
	url := c.url + "/" + strconv.Itoa(shard)
	req, err := http.NewRequestWithContext(fence.NewContext(ctx, tok), method, url, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.cli.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case guard.HTTPStatus(fence.Stale):
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", method, errStale)
	case guard.HTTPStatus(fence.Unverified):
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", method, errUnverified)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %s", method, resp.Status, b)
	}
	return resp, nil
}

// read reads the set. In guarded mode every method is fenced, so the
// first read of a new holder raises the mark (as guard.Claim would): an
// older holder's write can no longer land between this read and the
// write based on it.
func (c *registerClient) read(ctx context.Context, shard int, tok fence.Token) ([]int64, error) {
	resp, err := c.do(ctx, shard, tok, http.MethodGet, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body registerBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	return body.Elems, nil
}

func (c *registerClient) write(ctx context.Context, shard int, tok fence.Token, elems []int64, add int64) error {
	b, err := json.Marshal(registerBody{Elems: elems, Add: add})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, shard, tok, http.MethodPut, bytes.NewReader(b))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func (c *registerClient) close() { c.tr.CloseIdleConnections() }

// ---- sql: a row holding a set, written through sqlguard ----

// sqlTables names the tables of one SQL workload.
type sqlTables struct {
	Set, Log, Fence, Requests string
}

// sqlClient reads and writes one resource's row. In guarded mode the
// holder claims the resource after acquiring and fences every write
// transaction (sqlguard.Guard.RunTx); unguarded, it runs the same
// transaction without the fence.
type sqlClient struct {
	spec lineSpec
	db   *sql.DB
	g    *sqlguard.Guard
}

func openSQLClient(spec lineSpec, v sqlguard.Verifier) (*sqlClient, error) {
	db, err := sql.Open(spec.Driver, spec.DSN)
	if err != nil {
		return nil, err
	}
	// Every shard's loop shares the pool: keep it within what a
	// database server allows for all workers and lines together. SQLite
	// has one writer at a time; connections beyond two only wait in its
	// busy handler.
	if spec.Dialect == sqlguard.SQLite {
		db.SetMaxOpenConns(2)
	} else {
		db.SetMaxOpenConns(sqlConns)
	}
	g, err := sqlguard.New(spec.Dialect, sqlguard.WithTable(spec.Tables.Fence), sqlguard.WithRequestTable(spec.Tables.Requests),
		sqlguard.WithVerifier(v))
	if err != nil {
		db.Close()
		return nil, err
	}
	return &sqlClient{spec: spec, db: db, g: g}, nil
}

// q rewrites "?" placeholders for the dialect.
func q(d sqlguard.Dialect, query string) string {
	if d != sqlguard.PostgreSQL {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqlConns bounds the connections of one worker's pool for one line.
const sqlConns = 4

func sqlErr(err error) error {
	switch {
	case errors.Is(err, fence.ErrStale):
		return fmt.Errorf("%w: %w", errStale, err)
	case errors.Is(err, fence.ErrUnverified):
		return fmt.Errorf("%w: %w", errUnverified, err)
	case errors.Is(err, fence.ErrWrongLock):
		return fmt.Errorf("%w: %w", errRejected, err)
	}
	return err
}

func (c *sqlClient) claim(ctx context.Context, shard int, tok fence.Token) (bool, error) {
	if !c.spec.Guarded {
		return false, nil
	}
	return true, sqlErr(c.g.Claim(ctx, c.db, tok, c.spec.resource(shard)))
}

// readKind: the SELECT is not fenced; Claim fenced the holder in.
func (c *sqlClient) readKind() check.OpKind { return check.OpPlainRead }

func (c *sqlClient) read(ctx context.Context, shard int, _ fence.Token) ([]int64, error) {
	var s string
	err := c.db.QueryRowContext(ctx, q(c.spec.Dialect, "SELECT elems FROM "+c.spec.Tables.Set+" WHERE resource = ?"), c.spec.resource(shard)).Scan(&s)
	if err != nil {
		return nil, err
	}
	return parseElems(s)
}

func (c *sqlClient) write(ctx context.Context, shard int, tok fence.Token, elems []int64, add int64) error {
	d, t, res := c.spec.Dialect, c.spec.Tables, c.spec.resource(shard)
	body := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, q(d, "UPDATE "+t.Set+" SET elems = ?, ver = ver + 1 WHERE resource = ?"), formatElems(elems), res); err != nil {
			return err
		}
		var ver int64
		if err := tx.QueryRowContext(ctx, q(d, "SELECT ver FROM "+t.Set+" WHERE resource = ?"), res).Scan(&ver); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, q(d, "INSERT INTO "+t.Log+" (resource, ver, token, elem) VALUES (?, ?, ?, ?)"), res, ver, tok.Revision, add)
		return err
	}
	if c.spec.Guarded {
		return sqlErr(c.g.RunTx(ctx, c.db, nil, tok, []string{res}, body))
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := body(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (c *sqlClient) close() { c.db.Close() }

func formatElems(elems []int64) string {
	parts := make([]string, len(elems))
	for i, e := range elems {
		parts[i] = strconv.FormatInt(e, 10)
	}
	return strings.Join(parts, ",")
}

func parseElems(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	elems := make([]int64, len(parts))
	for i, p := range parts {
		e, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("elems %q: %w", s, err)
		}
		elems[i] = e
	}
	return elems, nil
}
