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

// httpAnswer is how the middleware answers one outcome: a status, and the
// type and title of the problem+json body.
type httpAnswer struct {
	status         int
	problem, title string
}

// problemBase prefixes the problem types; each names the type in the
// words of this package's earlier constants, kept for clients matching
// them.
const problemBase = "https://pkg.go.dev/github.com/fencekit/fencekit/guard#Problem"

// httpAnswers is the one table of the middleware's refusals, by outcome.
// Stale, wrong-lock and mark-ahead tokens get 409 Conflict, not 412,
// because 412 answers the standard conditional headers (If-Match and
// friends) that a service may use alongside fencing, and 409 is the HTTP
// mapping of gRPC's codes.Aborted, which package grpcguard uses.
var httpAnswers = [...]httpAnswer{
	fence.Stale:      {http.StatusConflict, problemBase + "Stale", "Stale fencing token"},
	fence.WrongLock:  {http.StatusConflict, problemBase + "WrongLock", "Fencing token for another lock"},
	fence.MarkAhead:  {http.StatusConflict, problemBase + "MarkAhead", "Fencing mark ahead of the lock service"},
	fence.Unverified: {http.StatusForbidden, problemBase + "Unverified", "Fencing token not verified"},
	fence.Missing:    {http.StatusPreconditionRequired, problemBase + "Missing", "Fencing token required"},
	fence.Malformed:  {http.StatusBadRequest, problemBase + "Malformed", "Malformed fencing token"},
	fence.Failed:     {http.StatusServiceUnavailable, problemBase + "Unavailable", "Fencing check unavailable"},
}

// answer returns the table's row for o; the zero row for Accepted and
// unknown outcomes.
func answer(o fence.Outcome) httpAnswer {
	if int(o) < len(httpAnswers) {
		return httpAnswers[o]
	}
	return httpAnswer{}
}

// HTTPStatus returns the status with which the middleware (see
// Guard.Middleware) refuses a request whose outcome is o:
//
//   - fence.Stale, fence.WrongLock, fence.MarkAhead: 409 Conflict;
//   - fence.Unverified: 403 Forbidden (resending cannot help);
//   - fence.Missing: 428 Precondition Required;
//   - fence.Malformed: 400 Bad Request;
//   - fence.Failed: 503 Service Unavailable, safe to retry (an invalid
//     Target from the route func gets 500 instead).
//
// It returns 0 for fence.Accepted, which the middleware does not answer.
func HTTPStatus(o fence.Outcome) int { return answer(o).status }

// ProblemType returns the RFC 9457 problem type, the "type" member of the
// middleware's problem+json body (see Problem), for outcome o; "" for
// fence.Accepted. Each is this package's documentation address followed
// by a fragment: "#ProblemStale", "#ProblemWrongLock",
// "#ProblemMarkAhead" (no holder can write until an operator resets the
// mark with Guard.ResetMark), "#ProblemUnverified" (the mark did not
// move), "#ProblemMissing", "#ProblemMalformed" and "#ProblemUnavailable"
// (fence.Failed). The body's "outcome" member carries o's word.
func ProblemType(o fence.Outcome) string { return answer(o).problem }

// Problem is the RFC 9457 body (media type application/problem+json) of
// the middleware's refusals. Clients may decode it to learn the mark.
type Problem struct {
	// Type is the problem type of the outcome (ProblemType).
	Type string `json:"type"`
	// Outcome is the outcome's word (fence.Outcome.String): "stale",
	// "wrong_lock", "mark_ahead", "unverified", "missing", "malformed" or
	// "failed".
	Outcome string `json:"outcome,omitempty"`
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
// with the token in the request context (fence.FromContext). A request
// that carries several tokens (a lease.Set's: see TokensFromValues) is
// checked with the token of the Target's lock (TokenForLock); the
// handler's context carries that token alone. Otherwise it answers with
// an application/problem+json body (see Problem):
//
//   - no token (fence.Missing): 428;
//   - a token that does not parse or is invalid (revision <= 0, an empty
//     list element, two tokens of one lock; fence.Malformed): 400;
//   - a stale token (fence.Stale): 409, naming the resource, the token
//     received and the mark;
//   - a token for another lock, or several tokens none of which is for
//     the Target's lock (fence.WrongLock, naming the first): 409;
//   - with WithVerifier, a stale token the verifier confirms as the
//     current holder's (the mark is ahead, fence.MarkAhead): 409;
//   - with WithVerifier, a newer token the verifier did not confirm
//     (fence.Unverified): 403;
//   - a store or verifier failure, one that gave no answer within the
//     Guard's check budget (WithCheckTimeout, default 5 s, so a request
//     without a deadline gets it too), or the request ended while
//     waiting (fence.Failed): 503; an invalid Target from route: 500.
//
// HTTPStatus and ProblemType give the status and the problem type of
// each outcome.
//
// Requests whose method is unfenced (by default GET, HEAD and OPTIONS; see
// WithUnfencedMethods) and requests route declines pass unchecked; when
// they carry valid tokens these are still put in their context
// (fence.NewTokensContext), so that calls they make onward propagate
// them.
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
			t, many, err := readTokens(r.Header.Values(Header))
			if !ok {
				switch {
				case err == nil && many != nil:
					r = r.WithContext(fence.NewTokensContext(r.Context(), many...))
				case err == nil:
					r = r.WithContext(fence.NewContext(r.Context(), t))
				}
				next.ServeHTTP(w, r)
				return
			}
			if many != nil {
				t = TokenForLock(many, tgt.Lock)
			}
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
	o := fence.OutcomeOf(err)
	a := answer(o)
	p := Problem{Type: a.problem, Outcome: o.String(), Title: a.title, Status: a.status,
		Resource: tgt.Resource, Lock: tgt.Lock, Detail: err.Error()}
	if !t.IsZero() {
		p.Token = t.String()
	}
	var r *fence.RefusedError
	if errors.As(err, &r) && !r.Mark.IsZero() {
		p.Mark = r.Mark.String()
	}
	switch {
	case o == fence.Unverified:
		p.Detail = fmt.Sprintf("token %s is not the fencing token of lock %q's current holder; the mark of resource %q did not move", t, t.Lock, tgt.Resource)
	case o == fence.WrongLock:
		p.Detail = fmt.Sprintf("resource %q is bound to lock %q; the token is for lock %q", tgt.Resource, tgt.Lock, t.Lock)
	case o == fence.Stale:
		p.Detail = fmt.Sprintf("token revision %d is older than revision %d, already accepted for resource %q", t.Revision, r.Mark.Revision, tgt.Resource)
	case o == fence.Missing:
		p.Detail = fmt.Sprintf("writes to resource %q must carry the %s header", tgt.Resource, Header)
	case errors.Is(err, ErrInvalidTarget):
		p.Type, p.Title, p.Status = "about:blank", "Internal Server Error", http.StatusInternalServerError
		p.Detail = ""
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
