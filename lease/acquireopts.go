package lease

import (
	"context"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An AcquireOption sets something for one acquisition (Acquire, TryAcquire,
// Do, AcquireAll, TryAcquireAll).
type AcquireOption interface {
	apply(*request) error
}

type acquireOptionFunc func(*request) error

func (f acquireOptionFunc) apply(r *request) error { return f(r) }

// WithMaxHold caps how long the lease may be held: once it has been held
// for d, the Client ends it, even while its renewals succeed, with a
// *LostError whose cause is ErrMaxHold (Done closes; Do's ctx is cancelled
// with it), and then deletes its record, comparing its creation revision,
// so that the lock passes to the next in line. The end comes first: work
// that stops when Done closes has stopped before anyone else can hold the
// lock. A holder whose work wedges, yet keeps its process alive and its
// renewals going, thus gives the lock up after d. d must be positive.
//
// The cap is measured on the holder's monotonic clock from the moment the
// acquisition was admitted; a Release before it ends the lease as usual. A cap is
// not a deadline for others: a holder cut off from etcd still ends at its
// validity deadline, whichever comes first.
func WithMaxHold(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(r *request) error {
		if d <= 0 {
			return fmt.Errorf("%w: maximum hold %v is not positive", ErrInvalidOption, d)
		}
		r.maxHold = d
		return nil
	})
}

// WithLeaseTTL sets the TTL of this acquisition's record, in place of the
// Client's (WithTTL): the record goes on a session lease of that TTL,
// which the Client grants on first use and renews every third of its TTL
// (one current session per TTL in use). A session of a TTL other than the
// Client's that has held and waited for nothing for a minute is revoked;
// the next acquisition with that TTL grants another. The
// TTL is how long others wait for the lock when this holder stops
// (crashes, pauses, is partitioned); a lease of TTL d whose renewals stop
// being confirmed ends d less the safety margin after the last confirmed
// renewal was sent, whatever the Client's TTL.
//
// d must be a whole number of seconds (etcd counts TTLs in seconds),
// between 1 s and 1 h, and more than twice the Client's safety margin when
// WithSafetyMargin set it (otherwise a session of TTL d gets the default
// margin, a tenth of d and at least 50 ms). A bad d fails with a *TTLError
// (matching ErrInvalidOption) before anything is written; a d below the
// etcd server's minimum fails the acquisition with ErrTTLTooShort, as
// WithTTL does, and nothing is held.
func WithLeaseTTL(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(r *request) error {
		switch {
		case d < time.Second || d > time.Hour:
			return &TTLError{TTL: d, Reason: "outside [1s, 1h]"}
		case d%time.Second != 0:
			return &TTLError{TTL: d, Reason: "not a whole number of seconds"}
		}
		r.ttl = d
		return nil
	})
}

// MaxMetadataLen is the longest metadata (WithMetadata) in bytes.
const MaxMetadataLen = 256

// WithMetadata stores md with the acquisition's record: a short note for
// operators, such as a job id or why the lock is held. The lease/admin
// tools and "fencekit status" show it (admin.Record.Value), and
// Lease.Metadata returns it.
// It is public to whoever may read the prefix, so put no secret in it;
// fencekit never logs it nor puts it in a metric label or span. md must be
// at most MaxMetadataLen bytes of UTF-8 without control characters.
func WithMetadata(md string) AcquireOption {
	return acquireOptionFunc(func(r *request) error {
		if err := ValidateMetadata(md); err != nil {
			return err
		}
		r.payload = record.EncodePayload(time.Time{}, md)
		return nil
	})
}

// ValidateMetadata returns nil for metadata WithMetadata accepts: at most
// MaxMetadataLen bytes of UTF-8 without control characters; otherwise an
// error matching ErrInvalidOption.
func ValidateMetadata(md string) error {
	switch {
	case len(md) > MaxMetadataLen:
		return fmt.Errorf("%w: metadata of %d bytes, more than %d", ErrInvalidOption, len(md), MaxMetadataLen)
	case !utf8.ValidString(md):
		return fmt.Errorf("%w: metadata is not UTF-8", ErrInvalidOption)
	}
	for _, r := range md {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: metadata holds the control character %U", ErrInvalidOption, r)
		}
	}
	return nil
}

// newRequest is the request of an exclusive acquisition of name with opts.
func newRequest(name string, try bool, opts []AcquireOption) (request, error) {
	req := request{name: name, kind: record.Exclusive, try: try}
	for _, o := range opts {
		if o == nil {
			return request{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&req); err != nil {
			return request{}, err
		}
	}
	return req, nil
}

// withTTLOnly returns req with the TTL of opts, the options of a
// semaphore's, a read/write lock's or an election's acquisition, of which
// only WithLeaseTTL applies; any other is an error matching
// ErrInvalidOption.
func withTTLOnly(req request, opts []AcquireOption) (request, error) {
	if len(opts) == 0 {
		return req, nil
	}
	var r request
	for _, o := range opts {
		if o == nil {
			return request{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&r); err != nil {
			return request{}, err
		}
	}
	if ttl := r.ttl; r != (request{ttl: ttl}) {
		return request{}, fmt.Errorf("%w: only WithLeaseTTL applies to a %s", ErrInvalidOption, req.op)
	}
	req.ttl = r.ttl
	return req, nil
}

// capHold ends l with ErrMaxHold once it has been held for d, unless it
// ends first.
func (l *Lease) capHold(d time.Duration) {
	t := time.AfterFunc(d, l.expireHold)
	context.AfterFunc(l.fin.Context(), func() { t.Stop() })
}

// expireHold ends l, which reached its maximum hold, and then deletes its
// record in the background. It waits for a Release, Reenter or Renew in
// flight (opMu), so that it never ends a lease whose Release is deciding.
func (l *Lease) expireHold() {
	l.opMu.Lock()
	live := l.Err() == nil
	if live {
		l.lose(ErrMaxHold)
	}
	l.opMu.Unlock()
	if live {
		l.c.bg.Spawn(l.dropRecord)
	}
}

// dropRecord deletes the record of l, which the Client ended, comparing
// its creation revision (which names this acquisition's record alone,
// whatever its value after calls with unknown outcomes). It tries until
// the delete is answered, the session ends (taking the record with it) or
// the Client closes.
func (l *Lease) dropRecord() {
	for {
		ctx, cancel := context.WithTimeout(l.c.bg.Context(), l.sess.ttl)
		resp, err := l.c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
			Then(clientv3.OpDelete(l.key)).Commit()
		cancel()
		switch {
		case err == nil:
			if resp.Succeeded {
				l.c.recs.forget(l, true) // the key may be reused
			}
			return
		case l.sess.failure() != nil:
			return
		}
		if !l.c.bg.Sleep(100 * time.Millisecond) {
			return
		}
	}
}
