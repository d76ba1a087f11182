package kubefence

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencekit/fencekit/fence"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// messagePrefix starts the policy's refusal messages: "fencekit: " and
// an outcome word, then key=value fields.
const messagePrefix = "fencekit: "

// policyOutcomes are the outcomes the policy refuses with, by word.
var policyOutcomes = map[string]fence.Outcome{
	fence.Stale.String():      fence.Stale,
	fence.WrongLock.String():  fence.WrongLock,
	fence.Missing.String():    fence.Missing,
	fence.Malformed.String():  fence.Malformed,
	fence.Unverified.String(): fence.Unverified, // the webhook's
}

// Refusal returns err as a *fence.RefusedError when it is the API
// server's refusal by the fencekit policy or webhook (a 422 Invalid or
// 403 Forbidden status whose message has "fencekit: <outcome>:"), and err
// unchanged otherwise (nil for nil): the webhook's "failed" (it could not
// verify) stays a plain error, as fence.Failed is no refusal. The
// RefusedError's Outcome is Stale, WrongLock, Missing, Malformed or
// Unverified; its Token, Mark and Lock come from the
// message; its Resource names the object ("deployments.apps/name"); its
// Err is err, so apierrors' predicates still match. errors.Is matches it
// with fence.ErrStale and the other sentinels, as every guard's refusal.
func Refusal(err error) error {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return err
	}
	s := st.Status()
	if s.Code != http.StatusUnprocessableEntity && s.Code != http.StatusForbidden {
		return err
	}
	_, rest, ok := strings.Cut(s.Message, messagePrefix)
	if !ok {
		return err
	}
	word, fields, _ := strings.Cut(rest, ":")
	outcome, ok := policyOutcomes[word]
	if !ok {
		return err
	}
	r := &fence.RefusedError{Outcome: outcome, Err: err}
	if d := s.Details; d != nil {
		r.Resource = d.Kind
		if d.Group != "" {
			r.Resource += "." + d.Group
		}
		r.Resource += "/" + d.Name
	}
	for _, f := range strings.Fields(fields) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "token":
			r.Token, _ = fence.Parse(v)
		case "mark":
			r.Mark, _ = fence.Parse(v)
		case "lock":
			if t, perr := fence.Parse("1:" + v); perr == nil {
				r.Lock = t.Lock
			}
		}
	}
	return r
}

// errRefusal wraps a refusal found by Refusal with what was being done.
func errRefusal(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("kubefence: %s: %w", op, Refusal(err))
}
