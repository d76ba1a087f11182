package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func members(names ...string) []candidate {
	var cs []candidate
	for _, n := range names {
		cs = append(cs, candidate{name: n, weight: 1})
	}
	return cs
}

func counts(owners []string) map[string]int {
	c := map[string]int{}
	for _, o := range owners {
		c[o]++
	}
	return c
}

func moved(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// requireFair fails t unless every member's share is within one shard of
// its weighted fair share and every shard has an owner.
func requireFair(t *testing.T, owners []string, cs []candidate) {
	t.Helper()
	c := counts(owners)
	var total int
	for _, m := range cs {
		if !m.draining {
			total += m.weight
		}
	}
	n := float64(len(owners))
	for _, m := range cs {
		fair := 0.0
		if !m.draining {
			fair = n * float64(m.weight) / float64(total)
		}
		if got := float64(c[m.name]); got < fair-1 || got > fair+1 {
			t.Fatalf("member %s owns %v shards, fair share %.2f (counts %v)", m.name, got, fair, c)
		}
	}
	if c[""] != 0 {
		t.Fatalf("%d shards unowned with %d members", c[""], len(cs))
	}
}

// TestPlanMovesExactly checks the bounds the plan's doc states, for equal
// weights: from a balanced plan, a join moves floor(n/(m+1)) shards, all
// to the newcomer, and a death or a drain moves the departed member's
// shards and nothing else.
func TestPlanMovesExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 10, 64, 256, 1000, 4096} {
		owners := make([]string, n)
		var cs []candidate
		id := 0
		for step := 0; step < 60; step++ {
			join := len(cs) < 2 || (len(cs) < 40 && rng.IntN(3) > 0)
			if join {
				id++
				name := fmt.Sprintf("m%d", id)
				next := plan(owners, append(slices.Clone(cs), candidate{name: name, weight: 1}))
				if len(cs) > 0 {
					want := n / (len(cs) + 1)
					if got := moved(owners, next); got != want {
						t.Fatalf("n=%d, %d members: a join moved %d shards, want %d", n, len(cs), got, want)
					}
					if got := counts(next)[name]; got != want {
						t.Fatalf("n=%d: newcomer got %d shards, want %d", n, got, want)
					}
				}
				cs = append(cs, candidate{name: name, weight: 1})
				owners = next
			} else {
				k := rng.IntN(len(cs))
				dead := cs[k].name
				had := counts(owners)[dead]
				if rng.IntN(2) == 0 {
					cs = slices.Delete(cs, k, k+1) // death
				} else {
					cs[k].draining = true // drain, then gone
				}
				next := plan(owners, cs)
				if got := moved(owners, next); got != had {
					t.Fatalf("n=%d: losing a member of %d shards moved %d", n, had, got)
				}
				owners = next
				cs = slices.DeleteFunc(cs, func(c candidate) bool { return c.draining })
			}
			requireFair(t, owners, cs)
			if !slices.Equal(plan(owners, cs), owners) {
				t.Fatalf("n=%d: plan is not stable for unchanged members", n)
			}
		}
	}
}

// TestPlanWeighted checks weighted fairness, the weighted join bound (the
// newcomer's quota plus at most one per old member), and that the issue's
// bound ceil(n/members)+1 holds for joins of weight at most the average.
func TestPlanWeighted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 40; round++ {
		n := 1 + rng.IntN(2000)
		owners := make([]string, n)
		var cs []candidate
		for j := 0; j < 12; j++ {
			w := 1 + rng.IntN(5)
			name := fmt.Sprintf("m%d", j)
			cand := append(slices.Clone(cs), candidate{name: name, weight: w})
			next := plan(owners, cand)
			requireFair(t, next, cand)
			if len(cs) > 0 {
				q := counts(next)[name]
				if got := moved(owners, next); got > q+len(cs) {
					t.Fatalf("n=%d: join of weight %d moved %d, quota %d, %d old members", n, w, got, q, len(cs))
				}
			}
			cs, owners = cand, next
		}
	}
}

// TestPlanConcurrentJoinsMoveOnce: joins that land in one plan move each
// shard at most once, and the result does not depend on the order in
// which the members are listed.
func TestPlanConcurrentJoinsMoveOnce(t *testing.T) {
	owners := plan(make([]string, 256), members("a", "b"))
	all := members("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	next := plan(owners, all)
	requireFair(t, next, all)
	rev := slices.Clone(all)
	slices.Reverse(rev)
	if !slices.Equal(next, plan(owners, rev)) {
		t.Fatal("plan depends on the members' order")
	}
	if got, want := moved(owners, next), 256-2*26; got != want {
		t.Fatalf("8 joins moved %d shards, want %d", got, want)
	}
}

func TestPlanNoMembers(t *testing.T) {
	owners := plan(make([]string, 4), members("a"))
	next := plan(owners, []candidate{{name: "a", weight: 1, draining: true}})
	if !slices.Equal(next, make([]string, 4)) {
		t.Fatalf("a draining member alone keeps %v", next)
	}
}
