package kubefence

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PatchFunc is the Patch method of a client-go typed client (such as
// clientset.AppsV1().Deployments(ns).Patch) or of a dynamic client's
// ResourceInterface.
type PatchFunc[T metav1.Object] func(ctx context.Context, name string, pt types.PatchType, data []byte,
	opts metav1.PatchOptions, subresources ...string) (T, error)

// StampObject writes ctx's token (fence.FromContext) into the Annotation
// of the object name with a merge patch through patch, which the policy
// admits only when the token is not older than the object's, and returns
// the object as stamped. With resourceVersion not empty, the patch has it
// as a precondition (a Conflict when the object changed since).
//
// It fences the writes whose body the policy cannot see: a status write
// (the API server resets metadata before admission) and a DELETE (which
// has no body). Make them right after, preconditioned on the returned
// object's resourceVersion: UpdateStatus with it in the object, or
// Delete with metav1.Preconditions. A successor's stamp in between
// changes the resourceVersion, so the write fails with a Conflict
// instead of landing. A refusal is returned as by Refusal (a
// *fence.RefusedError); without a token in ctx it fails with an error
// matching fence.ErrMissing and sends nothing.
func StampObject[T metav1.Object](ctx context.Context, patch PatchFunc[T], name, resourceVersion string) (T, error) {
	var zero T
	t, err := contextToken(ctx)
	if err != nil {
		return zero, err
	}
	meta := map[string]any{"annotations": map[string]string{Annotation: t.String()}}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return zero, err
	}
	obj, err := patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return zero, errRefusal("stamp "+name, err)
	}
	return obj, nil
}
