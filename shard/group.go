package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Group is a named set of shards shared by the members that Join it. It
// is safe for concurrent use; it holds nothing itself.
type Group struct {
	locks   *lease.Client
	ops     *admin.Admin // the operator's tools over locks' prefix: reads and release requests
	etcd    *clientv3.Client
	name    string
	shards  []string
	index   map[string]int
	digest  string
	counted bool // the shards are Count's "0".."n-1"
	cfg     config
	met     *metrics
}

// NewGroup returns the group called name (1 to 128 bytes, no "/", ":" or
// control characters) of the given shards. Its members keep their
// registrations through cli and lock their shards through locks; the
// shard called s is the lock "name:s" of locks' prefix, and the group's
// leader is elected in the election "name:". A bad argument returns an
// error matching ErrInvalidConfig.
func NewGroup(locks *lease.Client, cli *clientv3.Client, name string, shards Shards, opts ...Option) (*Group, error) {
	switch {
	case locks == nil || cli == nil:
		return nil, fmt.Errorf("%w: nil lease.Client or etcd client", ErrInvalidConfig)
	case shards.err != nil:
		return nil, shards.err
	case len(shards.names) == 0:
		return nil, fmt.Errorf("%w: no shards (use Count or Named)", ErrInvalidConfig)
	}
	if err := validName("group", name); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidConfig)
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	ops, err := admin.New(cli, locks.Prefix(), admin.WithLogger(cfg.log))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	g := &Group{locks: locks, ops: ops, etcd: cli, name: name, shards: shards.names, counted: shards.counted, cfg: cfg,
		index: make(map[string]int, len(shards.names))}
	h := sha256.New()
	for i, s := range g.shards {
		if err := lease.ValidateName(g.lock(i)); err != nil {
			return nil, fmt.Errorf("%w: shard %q of group %q: %w", ErrInvalidConfig, s, name, err)
		}
		g.index[s] = i
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	g.digest = hex.EncodeToString(h.Sum(nil)[:12])
	met, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, fmt.Errorf("shard: metrics: %w", err)
	}
	g.met = met
	return g, nil
}

// validName checks a group or member name.
func validName(what, name string) error {
	if len(name) > 128 || strings.ContainsRune(name, ':') {
		return fmt.Errorf("%w: %s name %.32q: longer than 128 bytes or contains \":\"", ErrInvalidConfig, what, name)
	}
	if err := lease.ValidateName(name); err != nil {
		return fmt.Errorf("%w: %s name: %w", ErrInvalidConfig, what, err)
	}
	return nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Shards returns the names of the group's shards, in order.
func (g *Group) Shards() []string { return append([]string(nil), g.shards...) }

// Lock returns the name of the lock (of the lease.Client's prefix) that
// fences shard s, and false when s is not a shard of the group. A
// shard's fencing tokens are tokens of this lock.
func (g *Group) Lock(s string) (string, bool) {
	i, ok := g.index[s]
	if !ok {
		return "", false
	}
	return g.lock(i), true
}

func (g *Group) lock(i int) string { return g.name + ":" + g.shards[i] }

func (g *Group) election() string          { return g.name + ":" }
func (g *Group) membersDir() string        { return g.cfg.prefix + g.name + "/members/" }
func (g *Group) memberKey(m string) string { return g.membersDir() + m }
func (g *Group) assignKey() string         { return g.cfg.prefix + g.name + "/assignment" }

// memberValue is a member's registration.
type memberValue struct {
	Weight   int  `json:"w"`
	Draining bool `json:"d,omitempty"`
}

// assignment is the leader's plan as stored in etcd.
type assignment struct {
	Shards  string   `json:"shards"`          // digest of the shard names
	Members []string `json:"members"`         // owners' names
	Owners  []int    `json:"owners"`          // per shard: index into Members, -1 for none
	Term    int64    `json:"term"`            // the writing leader's term (fencing revision)
	Named   []string `json:"named,omitempty"` // the shard names, unless they are Count's
}

func (g *Group) encode(owners []string, term int64) ([]byte, error) {
	a := assignment{Shards: g.digest, Owners: make([]int, len(owners)), Term: term}
	if !g.counted {
		a.Named = g.shards
	}
	idx := map[string]int{}
	for i, o := range owners {
		if o == "" {
			a.Owners[i] = -1
			continue
		}
		k, ok := idx[o]
		if !ok {
			k = len(a.Members)
			idx[o] = k
			a.Members = append(a.Members, o)
		}
		a.Owners[i] = k
	}
	return json.Marshal(a)
}

// decode returns the owners of an assignment value (all "" for none).
func (g *Group) decode(v []byte) (owners []string, term int64, err error) {
	owners = make([]string, len(g.shards))
	if len(v) == 0 {
		return owners, 0, nil
	}
	var a assignment
	if err := json.Unmarshal(v, &a); err != nil {
		return nil, 0, fmt.Errorf("shard: group %q: assignment: %w", g.name, err)
	}
	if a.Shards != g.digest || len(a.Owners) != len(g.shards) {
		return nil, 0, fmt.Errorf("%w: group %q has %d shards (digest %s) in etcd, %d (%s) here",
			ErrMismatch, g.name, len(a.Owners), a.Shards, len(g.shards), g.digest)
	}
	for i, k := range a.Owners {
		if k >= len(a.Members) {
			return nil, 0, fmt.Errorf("shard: group %q: assignment names member %d of %d", g.name, k, len(a.Members))
		}
		if k >= 0 {
			owners[i] = a.Members[k]
		}
	}
	return owners, a.Term, nil
}

// MemberInfo is a registered member, as Status reports it.
type MemberInfo struct {
	// Name is the member's name.
	Name string
	// Weight is its weight.
	Weight int
	// Draining reports that it is leaving (Leave): it is assigned nothing.
	Draining bool
}

// ShardStatus is one shard's state, as Status reports it.
type ShardStatus struct {
	// Shard is the shard's name.
	Shard string
	// Assigned is the member the leader's assignment gives it to, "" for
	// none.
	Assigned string
	// Owner is the member holding its lock now ("" for none), read from
	// the lock record's metadata.
	Owner string
	// Fence is the owner's fencing revision, 0 for none.
	Fence int64
	// Waiting are the members queued for its lock, first first.
	Waiting []string
}

// Moving reports whether the shard is on its way to another member: its
// assignment names a member that does not hold it yet.
func (s ShardStatus) Moving() bool { return s.Assigned != "" && s.Assigned != s.Owner }

// Status is a snapshot of a group: its members, its assignment and who
// holds each shard's lock. The parts are read one after another, so a
// group that is changing may show a shard moving that has just arrived.
type Status struct {
	// Members are the registered members, sorted by name.
	Members []MemberInfo
	// Term is the fencing revision of the leader term that wrote the
	// assignment, 0 when none was written yet.
	Term int64
	// Shards are the group's shards, in order.
	Shards []ShardStatus
}

// Status reads the group's state: one read of its members, one of its
// assignment, and one admin.Admin.InspectAll of the lock prefix (which
// reads every lock there and the TTLs of their sessions). It is for
// operators and tools (fencekit shards), not for a member's decisions.
func (g *Group) Status(ctx context.Context) (*Status, error) {
	ms, _, err := g.members(ctx)
	if err != nil {
		return nil, err
	}
	st := &Status{Members: ms}
	resp, err := g.etcd.Get(ctx, g.assignKey())
	if err != nil {
		return nil, fmt.Errorf("shard: group %q: read assignment: %w", g.name, err)
	}
	owners := make([]string, len(g.shards))
	if len(resp.Kvs) > 0 {
		if owners, st.Term, err = g.decode(resp.Kvs[0].Value); err != nil {
			return nil, err
		}
	}
	locks, err := g.ops.InspectAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard: group %q: %w", g.name, err)
	}
	byLock := make(map[string]admin.LockState, len(locks))
	for _, l := range locks {
		byLock[l.Name] = l
	}
	for i, s := range g.shards {
		ss := ShardStatus{Shard: s, Assigned: owners[i]}
		if l, ok := byLock[g.lock(i)]; ok {
			if l.Holder != nil {
				ss.Owner, ss.Fence = l.Holder.Value, l.Holder.Fence.Revision
			}
			for _, w := range l.Waiters {
				ss.Waiting = append(ss.Waiting, w.Value)
			}
		}
		st.Shards = append(st.Shards, ss)
	}
	return st, nil
}

// members reads the group's registrations, sorted by name, and the
// revision of the read.
func (g *Group) members(ctx context.Context) ([]MemberInfo, int64, error) {
	resp, err := g.etcd.Get(ctx, g.membersDir(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("shard: group %q: read members: %w", g.name, err)
	}
	var ms []MemberInfo
	for _, kv := range resp.Kvs {
		if m, ok := g.parseMember(kv.Key, kv.Value); ok {
			ms = append(ms, m)
		}
	}
	return ms, resp.Header.Revision, nil
}

// parseMember decodes a registration; false for a key or value that is
// not one (written by something else), which the group ignores.
func (g *Group) parseMember(key, value []byte) (MemberInfo, bool) {
	name, ok := strings.CutPrefix(string(key), g.membersDir())
	if !ok || validName("member", name) != nil {
		return MemberInfo{}, false
	}
	var v memberValue
	if err := json.Unmarshal(value, &v); err != nil || v.Weight < 1 || v.Weight > MaxWeight {
		return MemberInfo{}, false
	}
	return MemberInfo{Name: name, Weight: v.Weight, Draining: v.Draining}, true
}

// Inspect returns the Status of the group called name as Group.Status
// does, for a tool that does not know its shards: they are read from the
// stored assignment. opts are as for NewGroup (WithPrefix must match the
// members'). A group with no assignment yet returns an error matching
// ErrNoAssignment.
func Inspect(ctx context.Context, locks *lease.Client, cli *clientv3.Client, name string, opts ...Option) (*Status, error) {
	probe, err := NewGroup(locks, cli, name, Count(1), opts...)
	if err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, probe.assignKey())
	if err != nil {
		return nil, fmt.Errorf("shard: group %q: read assignment: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: group %q under %q", ErrNoAssignment, name, probe.cfg.prefix)
	}
	var a assignment
	if err := json.Unmarshal(resp.Kvs[0].Value, &a); err != nil {
		return nil, fmt.Errorf("shard: group %q: assignment: %w", name, err)
	}
	shards := Named(a.Named...)
	if len(a.Named) == 0 {
		shards = Count(len(a.Owners))
	}
	g, err := NewGroup(locks, cli, name, shards, opts...)
	if err != nil {
		return nil, err
	}
	return g.Status(ctx)
}
