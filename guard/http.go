package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fence"
)

// The HTTP statuses the middleware answers with. Stale and wrong-lock
// tokens both get StatusRejected: 409 Conflict, not 412, because 412 is
// the answer to the standard conditional headers (If-Match and friends)
// that a service may use alongside fencing, and 409 is the HTTP mapping of
// gRPC's codes.Aborted, which the gRPC interceptors use.
const (
	// StatusMissing answers a fenced request without a token: 428
	// Precondition Required.
	StatusMissing = http.StatusPreconditionRequired
	// StatusMalformed answers a token that is not valid: 400 Bad Request.
	StatusMalformed = http.StatusBadRequest
	// StatusRejected answers a stale or wrong-lock token: 409 Conflict.
	StatusRejected = http.StatusConflict
	// StatusUnverified answers a newer token that the Guard's Verifier
	// did not confirm: 403 Forbidden. Resending it cannot help.
	StatusUnverified = http.StatusForbidden
)

// The RFC 9457 problem types in the "type" member of the middleware's
// problem+json bodies. Each is the address of its own documentation.
const (
	// ProblemStale: the token is older than the resource's mark; status
	// 409. The holder was superseded: it must stop, not retry.
	ProblemStale = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemStale"
	// ProblemWrongLock: the token is for another lock than the one bound
	// to the resource; status 409.
	ProblemWrongLock = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemWrongLock"
	// ProblemMissing: a fenced request carried no Header; status 428.
	ProblemMissing = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemMissing"
	// ProblemMalformed: the Header is not one valid token; status 400.
	ProblemMalformed = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemMalformed"
	// ProblemUnverified: the token is newer than the resource's mark but
	// the lock service did not confirm it as its lock's current holder's
	// (see WithVerifier); status 403. The mark did not move.
	ProblemUnverified = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemUnverified"
	// ProblemMarkAhead: the token is older than the resource's mark, but
	// the Guard's verifier confirms it as its lock's current holder's:
	// the mark is ahead of the lock service (see ErrMarkAhead); status
	// 409. No holder can write until an operator resets the mark
	// (Guard.ResetMark).
	ProblemMarkAhead = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemMarkAhead"
	// ProblemUnavailable: the guard could not decide (store or verifier
	// failure or no answer within the check budget, or the request ended
	// while waiting); status 503, safe to retry.
	ProblemUnavailable = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#ProblemUnavailable"
)

// Problem is the RFC 9457 body (media type application/problem+json) of
// the middleware's refusals. Clients may decode it to learn the mark.
type Problem struct {
	// Type is one of the Problem* constants.
	Type string `json:"type"`
	// Title is a short fixed summary of Type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Resource is the resource the request was to write.
	Resource string `json:"resource,omitempty"`
	// Lock is the lock bound to the resource.
	Lock string `json:"lock,omitempty"`
	// Token is the received token, in its text form, when it parsed.
	Token string `json:"token,omitempty"`
	// Mark is the resource's mark, in text form, when known.
	Mark string `json:"mark,omitempty"`
}

// RouteFunc maps an HTTP request to the Target it writes. It returns false
// for a request that is not fenced, which passes to the next handler
// unchecked. It must not read the request body.
type RouteFunc func(r *http.Request) (Target, bool)

// HTTPOption configures Guard.Middleware.
type HTTPOption interface {
	applyHTTP(*httpConfig)
}

type httpConfig struct {
	unfenced map[string]bool
}

type httpOptionFunc func(*httpConfig)

func (f httpOptionFunc) applyHTTP(c *httpConfig) { f(c) }

// WithUnfencedMethods sets the request methods that pass without a token
// check, replacing the default GET, HEAD and OPTIONS. With no arguments
// every method is fenced. It panics if a method is empty: the methods are
// the program's constants, not input.
func WithUnfencedMethods(methods ...string) HTTPOption {
	set := map[string]bool{}
	for _, m := range methods {
		if m == "" {
			panic("guard: WithUnfencedMethods with an empty method name")
		}
		set[m] = true
	}
	return httpOptionFunc(func(c *httpConfig) { c.unfenced = set })
}

// Middleware returns HTTP middleware that fences the requests route maps
// to a Target. For such a request it reads the token from Header and
// serves the request through Do: the next handler runs only when the token
// may write the resource, with the resource held until it returns, and
// with the token in the request context (fence.FromContext). Otherwise it
// answers with an application/problem+json body (see Problem):
//
//   - no token: 428 (StatusMissing), type ProblemMissing;
//   - a token that does not parse or is invalid (revision <= 0, several
//     Header lines): 400 (StatusMalformed), type ProblemMalformed;
//   - a stale token: 409 (StatusRejected), type ProblemStale, naming the
//     resource, the token received and the mark;
//   - a token for another lock: 409 (StatusRejected), type
//     ProblemWrongLock;
//   - with WithVerifier, a stale token the verifier confirms as the
//     current holder's (the mark is ahead, see ErrMarkAhead): 409, type
//     ProblemMarkAhead;
//   - with WithVerifier, a newer token the verifier did not confirm: 403
//     (StatusUnverified), type ProblemUnverified;
//   - a store or verifier failure, one that gave no answer within the
//     Guard's check budget (WithCheckTimeout, default 5 s, so a request
//     without a deadline gets it too), or the request ended while
//     waiting: 503, type ProblemUnavailable; an invalid Target from
//     route: 500.
//
// Requests whose method is unfenced (by default GET, HEAD and OPTIONS; see
// WithUnfencedMethods) and requests route declines pass unchecked; when
// they carry a valid token it is still put in their context, so that
// calls they make onward propagate it.
//
// The next handler must finish its writes before it returns: work it
// leaves running afterwards is not fenced.
//
// Middleware has the standard shape, so it chains inline:
//
//	http.Handle("/reports/", g.Middleware(route)(reports))
//
// Misuse panics, when Middleware is called (at start-up), never per
// request: a nil route or option, and the returned function given a nil
// handler.
func (g *Guard) Middleware(route RouteFunc, opts ...HTTPOption) func(http.Handler) http.Handler {
	if route == nil {
		panic("guard: Middleware with a nil route func")
	}
	cfg := httpConfig{unfenced: map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true}}
	for _, o := range opts {
		if o == nil {
			panic("guard: Middleware with a nil option")
		}
		o.applyHTTP(&cfg)
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("guard: middleware wrapping a nil handler")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var tgt Target
			ok := !cfg.unfenced[r.Method]
			if ok {
				tgt, ok = route(r)
			}
			if !ok {
				if t, err := TokenFromHeader(r.Header); err == nil {
					r = r.WithContext(fence.NewContext(r.Context(), t))
				}
				next.ServeHTTP(w, r)
				return
			}
			t, err := TokenFromHeader(r.Header)
			ran, err := g.Serve(r.Context(), tgt, t, err, func(ctx context.Context) error {
				next.ServeHTTP(w, r.WithContext(ctx))
				return nil
			})
			if !ran {
				writeProblem(w, problemFor(tgt, t, err))
			}
		})
	}
}

// problemFor describes a refusal of t for tgt with error err.
func problemFor(tgt Target, t fence.Token, err error) Problem {
	p := Problem{Resource: tgt.Resource, Lock: tgt.Lock, Detail: err.Error()}
	if !t.IsZero() {
		p.Token = t.String()
	}
	var rej *RejectedError
	var unv *UnverifiedError
	var ahead *MarkAheadError
	switch {
	case errors.As(err, &ahead):
		p.Type, p.Title, p.Status = ProblemMarkAhead, "Fencing mark ahead of the lock service", StatusRejected
		p.Mark = ahead.Mark.String()
	case errors.As(err, &unv):
		p.Type, p.Title, p.Status = ProblemUnverified, "Fencing token not verified", StatusUnverified
		if !unv.Mark.IsZero() {
			p.Mark = unv.Mark.String()
		}
		p.Detail = fmt.Sprintf("token %s is not the fencing token of lock %q's current holder; the mark of resource %q did not move", t, t.Lock, tgt.Resource)
	case errors.As(err, &rej):
		p.Status = StatusRejected
		if !rej.Mark.IsZero() {
			p.Mark = rej.Mark.String()
		}
		if errors.Is(err, fence.ErrWrongLock) {
			p.Type, p.Title = ProblemWrongLock, "Fencing token for another lock"
			p.Detail = fmt.Sprintf("resource %q is bound to lock %q; the token is for lock %q", tgt.Resource, tgt.Lock, t.Lock)
		} else {
			p.Type, p.Title = ProblemStale, "Stale fencing token"
			p.Detail = fmt.Sprintf("token revision %d is older than revision %d, already accepted for resource %q", t.Revision, rej.Mark.Revision, tgt.Resource)
		}
	case errors.Is(err, ErrMissing):
		p.Type, p.Title, p.Status = ProblemMissing, "Fencing token required", StatusMissing
		p.Detail = fmt.Sprintf("writes to resource %q must carry the %s header", tgt.Resource, Header)
	case errors.Is(err, ErrMalformed):
		p.Type, p.Title, p.Status = ProblemMalformed, "Malformed fencing token", StatusMalformed
	case errors.Is(err, ErrInvalidTarget):
		p.Type, p.Title, p.Status = "about:blank", "Internal Server Error", http.StatusInternalServerError
		p.Detail = ""
	default:
		p.Type, p.Title, p.Status = ProblemUnavailable, "Fencing check unavailable", http.StatusServiceUnavailable
	}
	return p
}

func writeProblem(w http.ResponseWriter, p Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		http.Error(w, p.Title, p.Status)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	w.Write(body)
}
