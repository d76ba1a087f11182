package kubefence

import (
	"context"
	"crypto/sha256"
	_ "embed" // policy.yaml and binding.yaml
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fence"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

var (
	// PolicyYAML is the ValidatingAdmissionPolicy that Install installs,
	// with example values (lock "orders", apps/deployments): see
	// Policy.Objects for the values it replaces.
	//
	//go:embed policy.yaml
	PolicyYAML []byte
	// BindingYAML is the ValidatingAdmissionPolicyBinding of PolicyYAML.
	//
	//go:embed binding.yaml
	BindingYAML []byte
)

// ErrPolicy reports a Policy that Objects cannot install.
var ErrPolicy = errors.New("kubefence: invalid policy")

// Policy describes one installation of the admission policy: the API
// server fences writes to the objects of Resources with Lock's tokens.
type Policy struct {
	// Lock is the lock whose tokens the objects must carry (a valid
	// fence lock name).
	Lock string
	// Resources are the resources fenced, by API group ("" for the core
	// group) and plural resource name ("deployments", "configmaps", or a
	// custom resource's); every version is matched, and so is the
	// resource's status subresource, through which some resources'
	// annotations can be written (see the package doc). Other
	// subresources (scale) are not matched.
	Resources []schema.GroupResource
	// RequireToken makes every matched object carry a token on every
	// CREATE and UPDATE; without it, only objects that carry one already
	// are fenced (a write that drops it is refused as missing).
	RequireToken bool
	// BreakGlassUsers and BreakGlassGroups are identities the policy
	// does not apply to (request.userInfo's username and groups).
	BreakGlassUsers, BreakGlassGroups []string
	// NamespaceSelector and ObjectSelector, when not nil, narrow the
	// binding to matching namespaces and objects.
	NamespaceSelector, ObjectSelector *metav1.LabelSelector
	// Name names the policy and its binding; empty means "fencekit." and
	// the lock name, or a digest of it when that is not a valid object
	// name.
	Name string
}

// Objects returns the policy and binding that Install creates: PolicyYAML
// and BindingYAML with p's values. It fails with an error matching
// ErrPolicy when p is not valid.
func (p Policy) Objects() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	if err := p.validate(); err != nil {
		return nil, nil, err
	}
	var pol admissionregistrationv1.ValidatingAdmissionPolicy
	var bin admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict(PolicyYAML, &pol); err != nil {
		return nil, nil, fmt.Errorf("kubefence: policy.yaml: %w", err)
	}
	if err := yaml.UnmarshalStrict(BindingYAML, &bin); err != nil {
		return nil, nil, fmt.Errorf("kubefence: binding.yaml: %w", err)
	}
	name := p.name()
	pol.Name, bin.Name, bin.Spec.PolicyName = name, name, name
	ops := pol.Spec.MatchConstraints.ResourceRules[0].Operations
	rules := make([]admissionregistrationv1.NamedRuleWithOperations, 0, len(p.Resources))
	for _, r := range p.Resources {
		rule := admissionregistrationv1.NamedRuleWithOperations{}
		rule.Operations = ops
		rule.APIGroups = []string{r.Group}
		rule.APIVersions = []string{"*"}
		rule.Resources = []string{r.Resource, r.Resource + "/status"}
		rules = append(rules, rule)
	}
	pol.Spec.MatchConstraints.ResourceRules = rules
	pol.Spec.MatchConditions[0].Expression = breakGlassExpr(p.BreakGlassUsers, p.BreakGlassGroups)
	for i := range pol.Spec.Variables {
		switch v := &pol.Spec.Variables[i]; v.Name {
		case "lock":
			v.Expression = "'" + lockText(p.Lock) + "'"
		case "required":
			v.Expression = strconv.FormatBool(p.RequireToken)
		}
	}
	if p.NamespaceSelector != nil || p.ObjectSelector != nil {
		bin.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: p.NamespaceSelector, ObjectSelector: p.ObjectSelector,
		}
	}
	return &pol, &bin, nil
}

// validate checks p.
func (p Policy) validate() error {
	if err := fence.ValidateName(p.Lock); err != nil {
		return fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if len(p.Resources) == 0 {
		return fmt.Errorf("%w: no resources", ErrPolicy)
	}
	for _, r := range p.Resources {
		if r.Resource == "" || strings.ContainsAny(r.Resource, "/*") || strings.Contains(r.Group, "*") {
			return fmt.Errorf("%w: resource %q: want a plural resource name, without subresource or wildcard", ErrPolicy, r.String())
		}
	}
	if p.Name != "" {
		if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
			return fmt.Errorf("%w: name %q: %s", ErrPolicy, p.Name, strings.Join(errs, "; "))
		}
	}
	return nil
}

// name returns the policy's and binding's name.
func (p Policy) name() string {
	if p.Name != "" {
		return p.Name
	}
	n := "fencekit." + strings.ToLower(p.Lock)
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	h := sha256.Sum256([]byte(p.Lock))
	return "fencekit." + hex.EncodeToString(h[:8])
}

// lockText returns the lock name as the token's text form writes it
// (percent-encoded), which is how the policy compares it.
func lockText(lock string) string {
	return strings.TrimPrefix(fence.Token{Lock: lock, Revision: 1}.String(), "1:")
}

// breakGlassExpr returns the match condition that leaves users and
// groups out of the policy.
func breakGlassExpr(users, groups []string) string {
	return "!(request.userInfo.username in " + celList(users) + ") &&\n" +
		"!request.userInfo.groups.exists(g, g in " + celList(groups) + ")"
}

// celList returns a CEL list literal of the strings ss.
func celList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Install creates p's policy and binding in the cluster of cs, or updates
// them to p's when they exist. The API server enforces a new or changed
// binding about a second later (its admission plugin reads policies
// through an informer): wait before relying on it.
func Install(ctx context.Context, cs kubernetes.Interface, p Policy) error {
	pol, bin, err := p.Objects()
	if err != nil {
		return err
	}
	pols := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	old, err := pols.Get(ctx, pol.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		pol.ResourceVersion = old.ResourceVersion
		_, err = pols.Update(ctx, pol, metav1.UpdateOptions{})
	case apierrors.IsNotFound(err):
		_, err = pols.Create(ctx, pol, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubefence: install policy %s: %w", pol.Name, err)
	}
	bins := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	oldBin, err := bins.Get(ctx, bin.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		bin.ResourceVersion = oldBin.ResourceVersion
		_, err = bins.Update(ctx, bin, metav1.UpdateOptions{})
	case apierrors.IsNotFound(err):
		_, err = bins.Create(ctx, bin, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubefence: install binding %s: %w", bin.Name, err)
	}
	return nil
}

// Uninstall deletes p's binding and policy; ones already gone are not an
// error.
func Uninstall(ctx context.Context, cs kubernetes.Interface, p Policy) error {
	if err := p.validate(); err != nil {
		return err
	}
	name := p.name()
	err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubefence: delete binding %s: %w", name, err)
	}
	err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubefence: delete policy %s: %w", name, err)
	}
	return nil
}
