package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShards(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	code, _, errOut := fk(t, env, "shards", "tenants")
	require.Equal(t, ExitRefused, code, errOut)
	assert.Contains(t, errOut, "no assignment")

	cli := etcdtest.Client(t, cl)
	locks := newLocks(t, cl)
	g, err := shard.NewGroup(locks, cli, "tenants", shard.Named("acme", "globex", "initech", "umbrella"))
	require.NoError(t, err)
	ctx := ctxT(t, 20*time.Second)
	var ms []*shard.Member
	for _, name := range []string{"a", "b"} {
		m, err := g.Join(ctx, name, 1)
		require.NoError(t, err)
		go func() {
			for range m.Events() {
			}
		}()
		t.Cleanup(func() { m.Close() })
		ms = append(ms, m)
	}
	require.Eventually(t, func() bool { return len(ms[0].Owned()) == 2 && len(ms[1].Owned()) == 2 }, 10*time.Second, 10*time.Millisecond)

	code, out, errOut := fk(t, env, "shards", "--json", "tenants")
	require.Equal(t, 0, code, errOut)
	var j shardsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.Equal(t, "tenants", j.Group)
	require.Len(t, j.Members, 2)
	for _, m := range j.Members {
		assert.Equal(t, 2, m.Owned, "%+v", m)
		assert.Equal(t, 2, m.Assigned, "%+v", m)
	}
	require.Len(t, j.Shards, 4)
	assert.Equal(t, "acme", j.Shards[0].Shard)
	for _, s := range j.Shards {
		assert.False(t, s.Moving, "%+v", s)
		assert.Equal(t, s.Assigned, s.Owner, "%+v", s)
		assert.Equal(t, ms[0].Owned()[s.Shard].Revision+ms[1].Owned()[s.Shard].Revision, s.Fence)
	}

	code, out, errOut = fk(t, env, "shards", "--all", "tenants")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "group tenants: 4 shards, 2 members")
	assert.Contains(t, out, "0 moving, 0 unowned")
	assert.Contains(t, out, "umbrella")

	code, _, errOut = fk(t, env, "shards")
	assert.Equal(t, ExitUsage, code, errOut)
	code, _, errOut = fk(t, env, "shards", "a/b")
	assert.Equal(t, ExitUsage, code, errOut)
}
