package kubefence

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Annotation is the annotation that carries an object's fencing token, in
// fence's text form ("42:orders").
const Annotation = "fencekit.io/fencing-token"

// contextToken returns ctx's fencing token (fence.FromContext), or an
// error matching fence.ErrMissing when it carries none.
func contextToken(ctx context.Context) (fence.Token, error) {
	t, ok := fence.FromContext(ctx)
	if !ok {
		return fence.Token{}, fmt.Errorf("kubefence: no fencing token in the context: %w", fence.ErrMissing)
	}
	if err := t.Validate(); err != nil {
		return fence.Token{}, fmt.Errorf("kubefence: %w", err)
	}
	return t, nil
}

// Stamp sets obj's Annotation to t. It fails, leaving obj unchanged, when
// t is not valid (fence.ErrInvalid).
func Stamp(obj metav1.Object, t fence.Token) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("kubefence: %w", err)
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[Annotation] = t.String()
	obj.SetAnnotations(a)
	return nil
}

// StampContext stamps obj with ctx's token (fence.FromContext): the
// leader's ctx of fencelock and ctrlfence carries the term's token. Call
// it before Create or Update. Without a token in ctx it fails with an
// error matching fence.ErrMissing and leaves obj unchanged.
func StampContext(ctx context.Context, obj metav1.Object) error {
	t, err := contextToken(ctx)
	if err != nil {
		return err
	}
	return Stamp(obj, t)
}

// TokenOf returns the token obj's Annotation carries: an error matching
// fence.ErrMissing when it has none, or fence.ErrSyntax when it is not a
// token.
func TokenOf(obj metav1.Object) (fence.Token, error) {
	text, ok := obj.GetAnnotations()[Annotation]
	if !ok {
		return fence.Token{}, fmt.Errorf("kubefence: no %s annotation: %w", Annotation, fence.ErrMissing)
	}
	return fence.Parse(text)
}

// StampPatch returns the patch data of type pt with t written into the
// object's Annotation, and, when resourceVersion is not empty, with that
// resourceVersion as a precondition (the API server refuses the patch
// with a Conflict when the object has another). Merge, strategic-merge
// and apply (server-side apply, YAML or JSON) patches get the annotation
// in their metadata; a JSON patch (RFC 6902) gets an "add" operation,
// which needs the object to have annotations already (a fenced object
// has its token), and a "test" of the resourceVersion first. The
// returned data is JSON.
func StampPatch(pt types.PatchType, data []byte, t fence.Token, resourceVersion string) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("kubefence: %w", err)
	}
	switch pt {
	case types.JSONPatchType:
		return stampJSONPatch(data, t, resourceVersion)
	case types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType:
		return stampObjectPatch(data, t, resourceVersion)
	}
	return nil, fmt.Errorf("kubefence: cannot stamp a patch of type %q", pt)
}

// StampPatchContext is StampPatch with ctx's token (fence.FromContext):
// without one it fails with an error matching fence.ErrMissing.
func StampPatchContext(ctx context.Context, pt types.PatchType, data []byte, resourceVersion string) ([]byte, error) {
	t, err := contextToken(ctx)
	if err != nil {
		return nil, err
	}
	return StampPatch(pt, data, t, resourceVersion)
}

// stampObjectPatch writes the annotation (and resourceVersion) into the
// metadata of a patch that is a partial object (JSON, or YAML for apply).
func stampObjectPatch(data []byte, t fence.Token, resourceVersion string) ([]byte, error) {
	var obj map[string]any
	if len(strings.TrimSpace(string(data))) > 0 {
		js, err := yaml.YAMLToJSON(data) // JSON is YAML: unchanged
		if err != nil {
			return nil, fmt.Errorf("kubefence: patch: %w", err)
		}
		if err := json.Unmarshal(js, &obj); err != nil {
			return nil, fmt.Errorf("kubefence: patch: %w", err)
		}
	}
	if obj == nil {
		obj = map[string]any{}
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		if obj["metadata"] != nil {
			return nil, fmt.Errorf("kubefence: patch: metadata is not an object")
		}
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	ann, ok := meta["annotations"].(map[string]any)
	if !ok {
		ann = map[string]any{} // absent or null: null would remove them all
		meta["annotations"] = ann
	}
	ann[Annotation] = t.String()
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	return json.Marshal(obj)
}

// stampJSONPatch appends the annotation's "add" to a JSON patch, after a
// "test" of resourceVersion when it is not empty.
func stampJSONPatch(data []byte, t fence.Token, resourceVersion string) ([]byte, error) {
	var ops []any
	if len(strings.TrimSpace(string(data))) > 0 {
		if err := json.Unmarshal(data, &ops); err != nil {
			return nil, fmt.Errorf("kubefence: JSON patch: %w", err)
		}
	}
	if resourceVersion != "" {
		ops = append([]any{map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": resourceVersion}}, ops...)
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(Annotation, "~", "~0"), "/", "~1")
	ops = append(ops, map[string]any{"op": "add", "path": path, "value": t.String()})
	return json.Marshal(ops)
}
