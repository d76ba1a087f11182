package kubefence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Example shows the three parts without a cluster: the policy Install
// would create, a leader's write stamped with its term's token, and the
// API server's refusal of a stale one as a *fence.RefusedError.
func Example() {
	p := kubefence.Policy{
		Lock:             "orders",
		Resources:        []schema.GroupResource{{Group: "apps", Resource: "deployments"}},
		BreakGlassGroups: []string{"ops:break-glass"},
	}
	pol, bin, err := p.Objects()
	if err != nil {
		panic(err)
	}
	fmt.Println(pol.Name, bin.Spec.PolicyName, pol.Spec.MatchConstraints.ResourceRules[0].Resources)

	// The leader's ctx (fencelock, ctrlfence) carries its token.
	ctx := fence.NewContext(context.Background(), fence.Token{Lock: "orders", Revision: 57})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if err := kubefence.StampContext(ctx, cm); err != nil {
		panic(err)
	}
	fmt.Println(cm.Annotations[kubefence.Annotation])
	patch, _ := kubefence.StampPatchContext(ctx, types.MergePatchType, []byte(`{"data":{"v":"1"}}`), "")
	fmt.Println(string(patch))

	// What the API server answers a superseded leader's write.
	refusal := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c", nil)
	refusal.ErrStatus.Message = "ValidatingAdmissionPolicy 'fencekit.orders' with binding 'fencekit.orders' " +
		"denied request: fencekit: stale: token=41:orders mark=57:orders lock=orders"
	err = kubefence.Refusal(refusal)
	var r *fence.RefusedError
	fmt.Println(errors.Is(err, fence.ErrStale), errors.As(err, &r) && r.Token.Revision == 41 && r.Mark.Revision == 57)
	// Output:
	// fencekit.orders fencekit.orders [deployments deployments/status]
	// 57:orders
	// {"data":{"v":"1"},"metadata":{"annotations":{"fencekit.io/fencing-token":"57:orders"}}}
	// true true
}
