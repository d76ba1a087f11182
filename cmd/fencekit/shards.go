package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/shard"
)

const shardsSynopsis = "shards [--json] [--all] [--group-prefix P] [flags] GROUP"

func init() { synopses["shards"] = shardsSynopsis }

const shardsHelp = `Show a shard group (package shard): its members and their weights, how
many shards each owns and is assigned, and the shards on their way to
another member ("moving": the leader's assignment names a member that does
not hold the shard's lock yet) or owned by nobody. --all lists every
shard. The shards are read from the group's stored assignment; their locks
are "GROUP:SHARD" under the lock prefix (--prefix).

Exit codes: 0 shown; 1 the group has no assignment (no member has led it
under this --group-prefix); 64 usage error; 69 connection error.`

func cmdShards(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("shards", shardsHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	asJSON := fs.Bool("json", false, "print JSON: {group, term, members: [{name, weight, draining, owned, assigned}], shards: [{shard, assigned, owner, fence, waiting, moving}]}")
	all := fs.Bool("all", false, "list every shard, not only those moving or unowned")
	prefix := fs.String("group-prefix", shard.DefaultPrefix, "etcd prefix of the groups' membership and assignment keys")
	pos, err := parse(fs, args, e)
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one GROUP")
	default:
		err = conn.check()
	}
	if err != nil {
		return usageFail(e, "shards", err)
	}
	cli, err := conn.connect(e)
	if err != nil {
		return fail(e, "shards", ExitConn, err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, conn.options()...)
	if err != nil {
		return fail(e, "shards", ExitUsage, err)
	}
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	st, err := shard.Inspect(ctx, locks, cli, pos[0], shard.WithPrefix(*prefix))
	switch {
	case errors.Is(err, shard.ErrNoAssignment):
		return fail(e, "shards", ExitRefused, err)
	case errors.Is(err, shard.ErrInvalidConfig), errors.Is(err, shard.ErrMismatch):
		return fail(e, "shards", ExitUsage, err)
	case err != nil:
		return fail(e, "shards", ExitConn, err)
	}
	j := toShardsJSON(pos[0], st)
	if *asJSON {
		return writeJSON(e, "shards", j)
	}
	printShards(e, j, *all)
	return ExitOK
}

type shardsJSON struct {
	Group   string            `json:"group"`
	Term    int64             `json:"term"`
	Members []shardMemberJSON `json:"members"`
	Shards  []shardJSON       `json:"shards"`
}

type shardMemberJSON struct {
	Name     string `json:"name"`
	Weight   int    `json:"weight"`
	Draining bool   `json:"draining"`
	Owned    int    `json:"owned"`
	Assigned int    `json:"assigned"`
}

type shardJSON struct {
	Shard    string   `json:"shard"`
	Assigned string   `json:"assigned"`
	Owner    string   `json:"owner"`
	Fence    int64    `json:"fence"`
	Waiting  []string `json:"waiting"`
	Moving   bool     `json:"moving"`
}

func toShardsJSON(group string, st *shard.Status) shardsJSON {
	j := shardsJSON{Group: group, Term: st.Term, Members: []shardMemberJSON{}, Shards: []shardJSON{}}
	owned, assigned := map[string]int{}, map[string]int{}
	for _, s := range st.Shards {
		owned[s.Owner]++
		assigned[s.Assigned]++
		j.Shards = append(j.Shards, shardJSON{Shard: s.Shard, Assigned: s.Assigned, Owner: s.Owner, Fence: s.Fence,
			Waiting: append([]string{}, s.Waiting...), Moving: s.Moving()})
	}
	for _, m := range st.Members {
		j.Members = append(j.Members, shardMemberJSON{Name: m.Name, Weight: m.Weight, Draining: m.Draining,
			Owned: owned[m.Name], Assigned: assigned[m.Name]})
	}
	return j
}

func printShards(e *Env, j shardsJSON, all bool) {
	moving, unowned := 0, 0
	for _, s := range j.Shards {
		if s.Moving {
			moving++
		}
		if s.Owner == "" {
			unowned++
		}
	}
	fmt.Fprintf(e.Stdout, "group %s: %d shards, %d members, assignment of term %d; %d moving, %d unowned\n",
		j.Group, len(j.Shards), len(j.Members), j.Term, moving, unowned)
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tWEIGHT\tOWNED\tASSIGNED\tSTATE")
	for _, m := range j.Members {
		state := "active"
		if m.Draining {
			state = "draining"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", m.Name, m.Weight, m.Owned, m.Assigned, state)
	}
	tw.Flush()
	if !all && moving+unowned == 0 {
		return
	}
	fmt.Fprintln(e.Stdout)
	tw = tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tOWNER\tFENCE\tASSIGNED\tWAITING")
	for _, s := range j.Shards {
		if !all && !s.Moving && s.Owner != "" {
			continue
		}
		fence := "-"
		if s.Fence > 0 {
			fence = fmt.Sprint(s.Fence)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Shard, orDash(s.Owner), fence, orDash(s.Assigned), orDash(strings.Join(s.Waiting, ",")))
	}
	tw.Flush()
}
