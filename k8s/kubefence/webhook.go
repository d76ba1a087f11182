package kubefence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fencekit/fencekit/fence"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TokenVerifier tells whether a token is its lock's current holder's:
// *lease.Verifier is one. Verify returns nil for the current holder's
// token, an error matching fence.ErrUnverified for any other, and another
// error when it cannot tell.
type TokenVerifier interface {
	Verify(ctx context.Context, t fence.Token) error
}

// WebhookTimeout bounds one verification; the webhook configuration
// gives the API server's call WebhookTimeout plus a second.
const WebhookTimeout = 3 * time.Second

// maxReview bounds the size of an AdmissionReview the webhook reads.
const maxReview = 3 << 20

// NewWebhook returns the handler of a validating admission webhook, the
// stricter option next to the policy: it lets a CREATE or UPDATE through
// only when the fencing token the object carries is the current holder's
// of lock, as v says (lease.Verifier asks etcd). So it also refuses a
// forged token, a higher one included, which the policy cannot tell from
// a genuine one. It refuses (403, "fencekit: unverified: ...") a token v
// does not confirm, a malformed one or one of another lock, and fails
// closed ("fencekit: failed: ...") when v cannot tell, etcd unreachable
// included; Refusal maps the first to a *fence.RefusedError with Outcome
// Unverified. Objects without a token, and every other operation, are let
// through: that is the policy's part (missing), so install both.
//
// The webhook adds a round trip to etcd to every fenced write; see
// WebhookConfiguration for its registration.
func NewWebhook(v TokenVerifier, lock string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
		if err == nil {
			err = json.Unmarshal(body, &review)
		}
		if err != nil || review.Request == nil {
			http.Error(w, "kubefence: not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if msg := decide(r.Context(), v, lock, review.Request); msg != "" {
			resp.Allowed = false
			resp.Result = &metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusForbidden,
				Reason: metav1.StatusReasonForbidden, Message: msg,
			}
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
}

// decide returns "" to admit req, or the refusal's message.
func decide(ctx context.Context, v TokenVerifier, lock string, req *admissionv1.AdmissionRequest) string {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return ""
	}
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return "fencekit: failed: the object does not decode"
	}
	text, ok := obj.Metadata.Annotations[Annotation]
	if !ok {
		return ""
	}
	t, err := fence.Parse(text)
	if err != nil {
		return "fencekit: malformed: token= mark= lock=" + lockText(lock)
	}
	if t.Lock != lock {
		return "fencekit: wrong_lock: token=" + t.String() + " mark= lock=" + lockText(lock)
	}
	ctx, cancel := context.WithTimeout(ctx, WebhookTimeout)
	defer cancel()
	switch err := v.Verify(ctx, t); {
	case err == nil:
		return ""
	case errors.Is(err, fence.ErrUnverified):
		return "fencekit: unverified: token=" + t.String() + " mark= lock=" + lockText(lock)
	default:
		return fmt.Sprintf("fencekit: failed: token %s not verified: %v", t, err)
	}
}

// WebhookConfiguration returns the ValidatingWebhookConfiguration of a
// webhook served by NewWebhook at url (https), whose serving certificate
// caBundle (PEM) signs, for p's resources, break-glass identities and
// selectors; it is named after p (Policy.Name's rule). It fails closed
// (failurePolicy Fail) and declares no side effects.
func WebhookConfiguration(p Policy, url string, caBundle []byte) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	pol, bin, err := p.Objects()
	if err != nil {
		return nil, err
	}
	var rules []admissionregistrationv1.RuleWithOperations
	for _, r := range pol.Spec.MatchConstraints.ResourceRules {
		rules = append(rules, r.RuleWithOperations)
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32((WebhookTimeout + time.Second) / time.Second)
	wh := admissionregistrationv1.ValidatingWebhook{
		Name:                    "token.fencekit.io",
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
		Rules:                   rules,
		FailurePolicy:           &fail,
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         pol.Spec.MatchConditions,
	}
	if mr := bin.Spec.MatchResources; mr != nil {
		wh.NamespaceSelector, wh.ObjectSelector = mr.NamespaceSelector, mr.ObjectSelector
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: pol.Name},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{wh},
	}, nil
}
