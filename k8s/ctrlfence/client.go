package ctrlfence

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// NewClient returns c with every write fenced by the token of the write's
// ctx (fence.FromContext: a reconciler's ctx under Options carries the
// term's): Create, Update, Patch (every patch type) and Apply send the
// token in kubefence.Annotation, for package kubefence's admission policy
// to check. Writes whose body the policy cannot see, Delete and every
// subresource write (status), first stamp the object with a merge patch
// (kubefence.StampObject) and then go out preconditioned on the
// resourceVersion it returned, so that a successor's write in between
// makes them fail with a Conflict. A write whose ctx has no token fails
// with an error matching fence.ErrMissing and sends nothing. The policy's
// refusals are returned as *fence.RefusedError (kubefence.Refusal):
// errors.Is(err, fence.ErrStale) and the like. Reads, watches,
// DeleteAllOf and subresource creates (evictions, token requests) are
// passed through unfenced.
func NewClient(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := kubefence.StampContext(ctx, obj); err != nil {
				return err
			}
			return kubefence.Refusal(c.Create(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := kubefence.StampContext(ctx, obj); err != nil {
				return err
			}
			return kubefence.Refusal(c.Update(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			t, err := token(ctx)
			if err != nil {
				return err
			}
			return kubefence.Refusal(c.Patch(ctx, obj, stampedPatch{patch, t, ""}, opts...))
		},
		Apply: func(ctx context.Context, c client.WithWatch, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			u, err := stampApply(ctx, ac, "")
			if err != nil {
				return err
			}
			return kubefence.Refusal(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...))
		},
		Delete:            fencedDelete,
		SubResourceUpdate: fencedSubResourceUpdate,
		SubResourcePatch:  fencedSubResourcePatch,
		SubResourceApply:  fencedSubResourceApply,
	})
}

// NewManagerClient is a manager.Options.NewClient (and cluster.Options')
// that builds controller-runtime's default client, reads through the
// manager's cache included, fenced by NewClient.
func NewManagerClient(config *rest.Config, options client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return NewClient(c), nil
}

// token returns ctx's token, or an error matching fence.ErrMissing.
func token(ctx context.Context) (fence.Token, error) {
	t, ok := fence.FromContext(ctx)
	if !ok {
		return fence.Token{}, fmt.Errorf("ctrlfence: no fencing token in the context: %w", fence.ErrMissing)
	}
	return t, t.Validate()
}

// stampedPatch is a patch whose data carries a token (and, when rv is not
// empty, a resourceVersion precondition).
type stampedPatch struct {
	client.Patch
	t  fence.Token
	rv string
}

func (p stampedPatch) Data(obj client.Object) ([]byte, error) {
	data, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	return kubefence.StampPatch(p.Type(), data, p.t, p.rv)
}

// stampApply returns ac as an unstructured object carrying ctx's token
// (and resourceVersion rv as a precondition when not empty).
func stampApply(ctx context.Context, ac runtime.ApplyConfiguration, rv string) (*unstructured.Unstructured, error) {
	t, err := token(ctx)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(ac)
	if err != nil {
		return nil, fmt.Errorf("ctrlfence: apply configuration: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("ctrlfence: apply configuration: %w", err)
	}
	if err := kubefence.Stamp(u, t); err != nil {
		return nil, err
	}
	if rv != "" {
		u.SetResourceVersion(rv)
	}
	return u, nil
}

// stamp writes ctx's token into the object of obj (a copy of obj is
// patched; obj is left as it is) with a merge patch, preconditioned on rv
// when not empty, and returns the stamped object's resourceVersion and
// UID. The policy refuses the stamp of a stale token.
func stamp(ctx context.Context, c client.Client, obj client.Object, rv string) (string, types.UID, error) {
	t, err := token(ctx)
	if err != nil {
		return "", "", err
	}
	cp, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return "", "", fmt.Errorf("ctrlfence: %T is not a client.Object", obj)
	}
	if err := c.Patch(ctx, cp, stampedPatch{client.RawPatch(types.MergePatchType, []byte("{}")), t, rv}); err != nil {
		return "", "", kubefence.Refusal(err)
	}
	return cp.GetResourceVersion(), cp.GetUID(), nil
}

// fencedDelete stamps obj, then deletes it preconditioned on the stamp's
// resourceVersion (and on the caller's precondition, if any, for the
// stamp).
func fencedDelete(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
	do := (&client.DeleteOptions{}).ApplyOptions(opts)
	var rv string
	if p := do.Preconditions; p != nil && p.ResourceVersion != nil {
		rv = *p.ResourceVersion
	}
	stampedRV, uid, err := stamp(ctx, c, obj, rv)
	if err != nil {
		return err
	}
	pre := client.Preconditions{UID: &uid, ResourceVersion: &stampedRV}
	return kubefence.Refusal(c.Delete(ctx, obj, append(opts, pre)...))
}

// fencedSubResourceUpdate stamps the object (preconditioned on obj's
// resourceVersion, if it has one), then updates the subresource with obj,
// stamped too, on the stamp's resourceVersion.
func fencedSubResourceUpdate(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	rv, _, err := stamp(ctx, c, obj, obj.GetResourceVersion())
	if err != nil {
		return err
	}
	// Resources whose status write keeps metadata (Deployments) get the
	// token in it too; the others ignore it.
	if err := kubefence.StampContext(ctx, obj); err != nil {
		return err
	}
	obj.SetResourceVersion(rv)
	return kubefence.Refusal(c.SubResource(sub).Update(ctx, obj, opts...))
}

// fencedSubResourcePatch stamps obj, then patches the subresource on the
// stamp's resourceVersion.
func fencedSubResourcePatch(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	rv, _, err := stamp(ctx, c, obj, "")
	if err != nil {
		return err
	}
	t, _ := fence.FromContext(ctx)
	return kubefence.Refusal(c.SubResource(sub).Patch(ctx, obj, stampedPatch{patch, t, rv}, opts...))
}

// fencedSubResourceApply stamps obj, then applies the subresource on the
// stamp's resourceVersion.
func fencedSubResourceApply(ctx context.Context, c client.Client, sub string, ac runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	u, err := stampApply(ctx, ac, "")
	if err != nil {
		return err
	}
	rv, _, err := stamp(ctx, c, u, "")
	if err != nil {
		return err
	}
	u.SetResourceVersion(rv)
	return kubefence.Refusal(c.SubResource(sub).Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...))
}
