package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// candidate is a member as the assignment sees it.
type candidate struct {
	name     string
	weight   int
	draining bool
}

// plan returns the next owner of every shard (by index; "" for none),
// given the previous owners and the members now registered. It is a pure
// function of its inputs, so every leader that reads the same assignment
// and membership from etcd computes the same plan; and it moves only what
// it must:
//
//  1. Each member that is not draining gets a quota: its weighted fair
//     share n·w/W rounded down, plus one for the members with the largest
//     remainders (ties: more shards held now first, then name), so every
//     quota is within one shard of the fair share and the quotas add up
//     to n.
//  2. A shard stays with its previous owner while that owner is a member,
//     is not draining and is within its quota (an owner above it keeps
//     the shards it ranks highest, by rendezvous hash).
//  3. The rest — shards of departed or draining members, shards shed by
//     members above quota, unowned shards — go one by one, in index
//     order, to the member below quota that ranks the shard highest.
//
// With equal weights and a balanced previous plan, a join moves exactly
// floor(n/(m+1)) shards (to the newcomer) and a death or drain exactly the
// departed member's shards: the tie-break in step 1 never lowers an old
// member's quota below what it holds, nor raises it above (see
// TestPlanMovesExactly). With weights, a join moves the newcomer's quota
// plus at most one shard per old member whose rounded share went up.
func plan(prev []string, members []candidate) []string {
	next := make([]string, len(prev))
	quota := quotas(prev, members)
	if len(quota) == 0 {
		return next
	}
	held := map[string][]int{}
	var free []int
	for i, o := range prev {
		if _, ok := quota[o]; ok {
			held[o] = append(held[o], i)
		} else {
			free = append(free, i)
		}
	}
	for o, shards := range held {
		if len(shards) > quota[o] {
			slices.SortStableFunc(shards, func(a, b int) int { return cmp.Compare(score(b, o), score(a, o)) })
			free = append(free, shards[quota[o]:]...)
			shards = shards[:quota[o]]
		}
		for _, i := range shards {
			next[i] = o
		}
		quota[o] -= len(shards)
	}
	slices.Sort(free)
	names := make([]string, 0, len(quota))
	for o := range quota {
		names = append(names, o)
	}
	slices.Sort(names)
	for _, i := range free {
		best, bestScore := "", uint64(0)
		for _, o := range names {
			if s := score(i, o); quota[o] > 0 && (best == "" || s > bestScore) {
				best, bestScore = o, s
			}
		}
		next[i] = best
		quota[best]--
	}
	return next
}

// quotas returns each non-draining member's number of shards (see plan),
// or nil when there is none.
func quotas(prev []string, members []candidate) map[string]int {
	n := int64(len(prev))
	var total int64
	var live []candidate
	for _, m := range members {
		if !m.draining && m.weight > 0 {
			live = append(live, m)
			total += int64(m.weight)
		}
	}
	if len(live) == 0 {
		return nil
	}
	count := map[string]int{}
	for _, o := range prev {
		count[o]++
	}
	q := make(map[string]int, len(live))
	left := n
	for _, m := range live {
		q[m.name] = int(n * int64(m.weight) / total)
		left -= int64(q[m.name])
	}
	slices.SortFunc(live, func(a, b candidate) int {
		ra, rb := n*int64(a.weight)%total, n*int64(b.weight)%total
		return cmp.Or(cmp.Compare(rb, ra), cmp.Compare(count[b.name], count[a.name]), cmp.Compare(a.name, b.name))
	})
	for i := int64(0); i < left; i++ {
		q[live[i].name]++
	}
	return q
}

// score ranks member o for shard i (rendezvous hashing).
func score(i int, o string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for k := range b {
		b[k] = byte(uint64(i) >> (8 * k))
	}
	h.Write(b[:])
	h.Write([]byte(o))
	return mix(h.Sum64())
}

// mix finishes an FNV hash (splitmix64's finaliser), so that names that
// differ only in their last byte still rank independently.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}
