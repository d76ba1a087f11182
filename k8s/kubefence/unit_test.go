package kubefence_test

import (
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestPolicyObjects: Objects fills in the lock (in its percent-encoded
// text form), the rules and the break-glass identities, and refuses what
// it cannot install.
func TestPolicyObjects(t *testing.T) {
	p := kubefence.Policy{
		Lock:            "shard 01",
		Resources:       []schema.GroupResource{{Resource: "configmaps"}},
		BreakGlassUsers: []string{`o"brien`},
		RequireToken:    true,
	}
	pol, bin, err := p.Objects()
	require.NoError(t, err)
	assert.Regexp(t, `^fencekit\.[0-9a-f]{16}$`, pol.Name, "a lock name that is no object name is digested")
	assert.Equal(t, pol.Name, bin.Spec.PolicyName)
	vars := map[string]string{}
	for _, v := range pol.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	assert.Equal(t, "'shard%2001'", vars["lock"])
	assert.Equal(t, "true", vars["required"])
	assert.Contains(t, pol.Spec.MatchConditions[0].Expression, `["o\"brien"]`)

	for _, bad := range []kubefence.Policy{
		{Lock: "", Resources: p.Resources},
		{Lock: "a/b", Resources: p.Resources},
		{Lock: "orders"},
		{Lock: "orders", Resources: []schema.GroupResource{{Resource: "deployments/scale"}}},
		{Lock: "orders", Resources: []schema.GroupResource{{Group: "*", Resource: "x"}}},
		{Lock: "orders", Resources: p.Resources, Name: "Not_A_Name"},
	} {
		_, _, err := bad.Objects()
		assert.ErrorIs(t, err, kubefence.ErrPolicy, "%+v", bad)
	}
}

// TestStampPatch: each patch type gets the token, and the
// resourceVersion precondition when one is given.
func TestStampPatch(t *testing.T) {
	tok := fence.Token{Lock: "orders", Revision: 7}
	for _, tc := range []struct {
		pt   types.PatchType
		in   string
		rv   string
		want string
	}{
		{types.MergePatchType, `{"data":{"v":"1"}}`, "", `{"data":{"v":"1"},"metadata":{"annotations":{"fencekit.io/fencing-token":"7:orders"}}}`},
		{types.MergePatchType, `{"metadata":{"annotations":null}}`, "12", `{"metadata":{"annotations":{"fencekit.io/fencing-token":"7:orders"},"resourceVersion":"12"}}`},
		{types.StrategicMergePatchType, ``, "", `{"metadata":{"annotations":{"fencekit.io/fencing-token":"7:orders"}}}`},
		{types.ApplyYAMLPatchType, "kind: ConfigMap\nmetadata:\n  name: c\n", "", `{"kind":"ConfigMap","metadata":{"annotations":{"fencekit.io/fencing-token":"7:orders"},"name":"c"}}`},
		{types.JSONPatchType, `[{"op":"remove","path":"/data/v"}]`, "12", `[{"op":"test","path":"/metadata/resourceVersion","value":"12"},{"op":"remove","path":"/data/v"},{"op":"add","path":"/metadata/annotations/fencekit.io~1fencing-token","value":"7:orders"}]`},
	} {
		got, err := kubefence.StampPatch(tc.pt, []byte(tc.in), tok, tc.rv)
		require.NoError(t, err, tc.pt)
		assert.JSONEq(t, tc.want, string(got), tc.pt)
	}
	_, err := kubefence.StampPatch(types.MergePatchType, []byte(`{"metadata":3}`), tok, "")
	assert.Error(t, err)
	_, err = kubefence.StampPatch(types.ApplyCBORPatchType, nil, tok, "")
	assert.Error(t, err)
	_, err = kubefence.StampPatch(types.MergePatchType, nil, fence.Token{}, "")
	assert.ErrorIs(t, err, fence.ErrInvalid)
}

// TestRefusalPassesOthers: errors that are not the policy's refusal come
// back unchanged.
func TestRefusalPassesOthers(t *testing.T) {
	assert.NoError(t, kubefence.Refusal(nil))
	plain := errors.New("boom")
	assert.Same(t, plain, kubefence.Refusal(plain))
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("fencekit: stale: token=1:a"))
	assert.Equal(t, error(conflict), kubefence.Refusal(conflict))
	other := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c", nil)
	assert.Equal(t, error(other), kubefence.Refusal(other))
	assert.Equal(t, fence.Accepted, fence.OutcomeOf(kubefence.Refusal(nil)))
}
