package redisguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/redis/go-redis/v9"
)

// fixture is a Guard on the tests' Redis with a claimed resource.
type fixture struct {
	cli *redis.Client
	g   *redisguard.Guard
	res string
	tgt guard.Target
}

// newFixture returns a Guard whose marks and resource names carry a
// random id, and claims its resource with a token of revision rev.
func newFixture(t *testing.T, rev int64, opts ...redisguard.Option) fixture {
	t.Helper()
	cli, id := testRedis(t)
	g, err := redisguard.New(cli, append([]redisguard.Option{redisguard.WithPrefix(id + ":mark:")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{cli: cli, g: g, res: id + "-orders"}
	f.tgt = guard.Target{Resource: f.res, Lock: "orders"}
	if rev > 0 {
		if err := g.Claim(context.Background(), tok(rev), f.res); err != nil {
			t.Fatalf("claim: %v", err)
		}
	}
	return f
}

func tok(rev int64) fence.Token { return fence.Token{Lock: "orders", Revision: rev} }

func (f fixture) key(name string) string { return redisguard.Key(f.res, name) }

// snapshot returns every key of the fixture's resource and the mark, with
// their values, to compare before and after a refused write.
func (f fixture) snapshot(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	keys, err := f.cli.Keys(ctx, "*"+f.res+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		d, err := f.cli.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := f.cli.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		has := "no TTL"
		if ttl > 0 { // its exact value moves on: tests that care check it
			has = "TTL"
		}
		out[k] = d + "|" + has
	}
	return out
}

func sameState(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("keys after: %d, before: %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %q changed", k)
		}
	}
}

func TestShapes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	g, tgt := f.g, f.tgt

	set, err := g.Set(ctx, tgt, tok(5), f.key("status"), "open", redisguard.EX(time.Minute))
	if err != nil || !set {
		t.Fatalf("Set = %v, %v", set, err)
	}
	if ttl := f.cli.TTL(ctx, f.key("status")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL after SET EX 60: %v", ttl)
	}
	set, err = g.Set(ctx, tgt, tok(5), f.key("status"), "again", redisguard.NX())
	if err != nil || set {
		t.Errorf("Set NX on an existing key = %v, %v; want false, nil", set, err)
	}
	set, err = g.Set(ctx, tgt, tok(5), f.key("status"), "kept ttl", redisguard.XX(), redisguard.KeepTTL())
	if err != nil || !set {
		t.Errorf("Set XX KEEPTTL = %v, %v", set, err)
	}
	if ttl := f.cli.TTL(ctx, f.key("status")).Val(); ttl <= 0 {
		t.Errorf("KEEPTTL lost the TTL: %v", ttl)
	}
	if _, err := g.Set(ctx, tgt, tok(5), f.key("px"), "v", redisguard.PX(1500*time.Millisecond)); err != nil {
		t.Errorf("Set PX: %v", err)
	}
	if n, err := g.HSet(ctx, tgt, tok(5), f.key("job"), "state", "running", "owner", "w1"); err != nil || n != 2 {
		t.Errorf("HSet = %d, %v; want 2", n, err)
	}
	if n, err := g.IncrBy(ctx, tgt, tok(6), f.key("count"), 41); err != nil || n != 41 {
		t.Errorf("IncrBy = %d, %v; want 41", n, err)
	}
	if n, err := g.IncrBy(ctx, tgt, tok(6), f.key("count"), 1); err != nil || n != 42 {
		t.Errorf("IncrBy = %d, %v; want 42", n, err)
	}
	if n, err := g.Del(ctx, tgt, tok(6), f.key("px"), f.key("missing")); err != nil || n != 1 {
		t.Errorf("Del = %d, %v; want 1", n, err)
	}
	r, err := g.Exec(ctx, tgt, tok(7),
		redisguard.Command("rpush", f.key("queue"), "a", "b"),
		redisguard.Command("HINCRBY", f.key("job"), "tries", "3"),
		redisguard.Command("SADD", f.key("tags"), "x"),
		redisguard.Command("EXPIRE", f.key("tags"), "60"),
		redisguard.Set(f.key("status"), "done"))
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	want := []any{int64(2), int64(3), int64(1), int64(1), "OK"}
	if len(r) != len(want) {
		t.Fatalf("Exec replies %v, want %v", r, want)
	}
	for i := range want {
		if r[i] != want[i] {
			t.Errorf("reply %d = %#v, want %#v", i, r[i], want[i])
		}
	}
	if m, err := g.Mark(ctx, f.res); err != nil || m != tok(7) {
		t.Errorf("Mark = %v, %v; want %v", m, err, tok(7))
	}
}

func TestStaleAndWrongLockChangeNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	g, tgt := f.g, f.tgt
	if _, err := g.Set(ctx, tgt, tok(9), f.key("v"), "by 9"); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)

	_, err := g.Set(ctx, tgt, tok(8), f.key("v"), "by 8")
	var stale *fence.RefusedError
	if !errors.As(err, &stale) || !errors.As(err, new(*fence.RefusedError)) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Set = %v, want a *fence.RefusedError matching fence.ErrStale", err)
	}
	if stale.Mark != tok(9) || stale.Token != tok(8) {
		t.Errorf("refusal mark %v token %v, want %v %v", stale.Mark, stale.Token, tok(9), tok(8))
	}
	var rej *fence.RefusedError
	if !errors.As(err, &rej) || rej.Mark != tok(9) || rej.Resource != f.res {
		t.Errorf("RejectedError = %+v", rej)
	}

	// A token of another lock, for a Target of that lock: the mark's lock
	// refuses it in the script.
	other := fence.Token{Lock: "invoices", Revision: 100}
	_, err = g.Exec(ctx, guard.Target{Resource: f.res, Lock: "invoices"}, other, redisguard.Set(f.key("v"), "other"))
	var wl *fence.RefusedError
	if !errors.As(err, &wl) || wl.Lock != "orders" || wl.Outcome != fence.WrongLock || !errors.As(err, new(*fence.RefusedError)) {
		t.Errorf("other lock's Exec = %v, want a *fence.RefusedError (wrong_lock) bound to orders", err)
	}
	// A token that does not match the Target: refused before sending.
	_, err = g.Exec(ctx, tgt, other, redisguard.Set(f.key("v"), "other"))
	if !errors.Is(err, fence.ErrWrongLock) {
		t.Errorf("Exec with a token for another lock than the Target's = %v, want ErrWrongLock", err)
	}
	sameState(t, f.snapshot(t), before)
	if got := f.cli.Get(ctx, f.key("v")).Val(); got != "by 9" {
		t.Errorf("value %q, want %q", got, "by 9")
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	g, tgt := f.g, f.tgt
	if _, err := g.Exec(ctx, tgt, tok(5), redisguard.Set(f.key("s"), "string"), redisguard.Set(f.key("a"), "A")); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"malformed token", func() error {
			_, err := g.Set(ctx, tgt, fence.Token{Lock: "orders", Revision: 0}, f.key("a"), "x")
			return err
		}, fence.ErrInvalid},
		{"malformed token matches fence.ErrInvalid", func() error {
			_, err := g.Set(ctx, tgt, fence.Token{Lock: "orders", Revision: -3}, f.key("a"), "x")
			return err
		}, fence.ErrInvalid},
		{"empty resource", func() error {
			_, err := g.Set(ctx, guard.Target{Lock: "orders"}, tok(6), redisguard.Key("", "a"), "x")
			return err
		}, guard.ErrInvalidTarget},
		{"resource with a brace", func() error {
			_, err := g.Set(ctx, guard.Target{Resource: "a{b", Lock: "orders"}, tok(6), "k", "x")
			return err
		}, guard.ErrInvalidTarget},
		{"key outside the resource's slot", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Set(f.key("a"), "x"), redisguard.Set(f.res+":plain", "x"))
			return err
		}, redisguard.ErrCrossSlot},
		{"key of another resource", func() error {
			_, err := g.Set(ctx, tgt, tok(6), redisguard.Key(f.res+"-other", "a"), "x")
			return err
		}, redisguard.ErrCrossSlot},
		{"command not allowed", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Command("FLUSHALL", f.key("a")))
			return err
		}, redisguard.ErrBadCommand},
		{"script text as a command", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Command("EVAL", f.key("a"), "redis.call('FLUSHALL')", "0"))
			return err
		}, redisguard.ErrBadCommand},
		{"bad SET option", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Command("SET", f.key("a"), "x", "GET"))
			return err
		}, redisguard.ErrBadCommand},
		{"EX and PX together", func() error {
			_, err := g.Set(ctx, tgt, tok(6), f.key("a"), "x", redisguard.EX(time.Second), redisguard.PX(time.Second))
			return err
		}, redisguard.ErrBadCommand},
		{"EX of a fraction of a second", func() error {
			_, err := g.Set(ctx, tgt, tok(6), f.key("a"), "x", redisguard.EX(1500*time.Millisecond))
			return err
		}, redisguard.ErrBadCommand},
		{"INCRBY of text", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Command("INCRBY", f.key("a"), "ten"))
			return err
		}, redisguard.ErrBadCommand},
		{"HSET without a value", func() error {
			_, err := g.HSet(ctx, tgt, tok(6), f.key("h"), "field")
			return err
		}, redisguard.ErrBadCommand},
		{"the mark key", func() error {
			_, err := g.Set(ctx, tgt, tok(6), g.MarkKey(f.res), "x")
			return err
		}, redisguard.ErrBadCommand},
		{"no commands", func() error {
			_, err := g.Exec(ctx, tgt, tok(6))
			return err
		}, redisguard.ErrBadCommand},
		{"zero Cmd", func() error {
			_, err := g.Exec(ctx, tgt, tok(6), redisguard.Cmd{})
			return err
		}, redisguard.ErrBadCommand},
		{"wrong type (script error) after a good command", func() error {
			_, err := g.Exec(ctx, tgt, tok(6),
				redisguard.Set(f.key("a"), "changed"),
				redisguard.Del(f.key("gone-if-applied")),
				redisguard.IncrBy(f.key("new"), 1),
				redisguard.HSet(f.key("s"), "f", "v"))
			var ce *redisguard.CommandError
			if errors.As(err, &ce) && (ce.Index != 3 || ce.Name != "HSET") {
				t.Errorf("CommandError %+v, want index 3, HSET", ce)
			}
			return err
		}, redisguard.ErrCommand},
		{"wrong type (script error) alone", func() error {
			_, err := g.IncrBy(ctx, tgt, tok(6), f.key("s"), 1)
			return err
		}, redisguard.ErrCommand},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want an error matching %v", err, c.want)
			}
			sameState(t, f.snapshot(t), before)
			if m, err := g.Mark(ctx, f.res); err != nil || m != tok(5) {
				t.Errorf("mark after: %v, %v; want %v", m, err, tok(5))
			}
		})
	}
}

// TestUndoRestoresTTLAndValues: a batch that fails at its last command
// leaves the keys its earlier commands changed as they were, TTLs and
// all, and deletes the keys they created.
func TestUndoRestoresTTLAndValues(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	g, tgt := f.g, f.tgt
	if _, err := g.Exec(ctx, tgt, tok(5),
		redisguard.Set(f.key("ttl"), "v1", redisguard.EX(100*time.Second)),
		redisguard.HSet(f.key("h"), "a", "1"),
		redisguard.Set(f.key("s"), "x")); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	_, err := g.Exec(ctx, tgt, tok(8),
		redisguard.Set(f.key("ttl"), "v2"), // drops the TTL
		redisguard.HSet(f.key("h"), "b", "2"),
		redisguard.Command("RPUSH", f.key("new"), "x"),
		redisguard.Command("SADD", f.key("s"), "m")) // WRONGTYPE
	if !errors.Is(err, redisguard.ErrCommand) {
		t.Fatalf("Exec = %v, want ErrCommand", err)
	}
	sameState(t, f.snapshot(t), before)
	if ttl := f.cli.TTL(ctx, f.key("ttl")).Val(); ttl < 90*time.Second {
		t.Errorf("TTL after undo: %v, want about 100s", ttl)
	}
	if m, _ := g.Mark(ctx, f.res); m != tok(5) {
		t.Errorf("mark after a failed batch: %v, want %v", m, tok(5))
	}
}

func TestUnclaimedWithoutVerifier(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 0)
	_, err := f.g.Set(ctx, f.tgt, tok(5), f.key("v"), "x")
	if !errors.Is(err, redisguard.ErrUnclaimed) || !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("write to an unclaimed resource = %v, want ErrUnclaimed and fence.ErrNoMark", err)
	}
	if n := f.cli.Exists(ctx, f.key("v"), f.g.MarkKey(f.res)).Val(); n != 0 {
		t.Errorf("%d keys exist after the refused write", n)
	}
	if _, err := f.g.Mark(ctx, f.res); !errors.Is(err, fence.ErrNoMark) {
		t.Errorf("Mark = %v, want ErrNoMark", err)
	}
	if err := f.g.Claim(ctx, tok(5), f.res); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Set(ctx, f.tgt, tok(5), f.key("v"), "x"); err != nil {
		t.Errorf("write after Claim: %v", err)
	}
	if err := f.g.Claim(ctx, tok(4), f.res); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Claim with an older token = %v, want ErrStale", err)
	}
}

func TestResetMark(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 1000)
	if err := f.g.ResetMark(ctx, f.res, tok(999), tok(7)); !errors.Is(err, fence.ErrMarkChanged) {
		t.Errorf("reset from a wrong old mark = %v, want ErrMarkChanged", err)
	}
	if err := f.g.ResetMark(ctx, f.res, tok(1000), tok(7)); err != nil {
		t.Fatal(err)
	}
	if m, _ := f.g.Mark(ctx, f.res); m != tok(7) {
		t.Errorf("mark after reset: %v", m)
	}
	if _, err := f.g.Set(ctx, f.tgt, tok(7), f.key("v"), "x"); err != nil {
		t.Errorf("write with the reset mark: %v", err)
	}
	if err := f.g.ResetMark(ctx, f.res, tok(7), fence.Token{Lock: "other", Revision: 1}); !errors.Is(err, fence.ErrWrongLock) {
		t.Errorf("reset to another lock = %v, want ErrWrongLock", err)
	}
}

func TestOptionsRefused(t *testing.T) {
	cli, _ := testRedis(t)
	for name, opts := range map[string][]redisguard.Option{
		"nil option":   {nil},
		"brace prefix": {redisguard.WithPrefix("a{b}:")},
		"nil verifier": {redisguard.WithVerifier(nil)},
		"nil logger":   {redisguard.WithLogger(nil)},
		"nil registry": {redisguard.WithMetrics(nil)},
		"nil tracer":   {redisguard.WithTracerProvider(nil)},
	} {
		if _, err := redisguard.New(cli, opts...); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := redisguard.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := redisguard.NewStore(cli, ""); err == nil {
		t.Error("NewStore with an empty prefix succeeded")
	}
}

// TestSingleCommandShapes runs one command of each argument count through
// the fenced function, which lays out a single command without counts
// (none, one and several arguments after the key take different paths),
// and reads each write back.
func TestSingleCommandShapes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	cases := []struct {
		cmd  redisguard.Cmd
		want any
	}{
		{redisguard.Command("INCR", f.key("n")), int64(1)},                                   // no argument
		{redisguard.IncrBy(f.key("n"), 41), int64(42)},                                       // one
		{redisguard.HSet(f.key("h"), "a", "1", "b", "2"), int64(2)},                          // four
		{redisguard.Set(f.key("s"), "v", redisguard.EX(time.Minute), redisguard.NX()), "OK"}, // four
		{redisguard.Set(f.key("s"), "w", redisguard.NX()), nil},                              // two, not set
		{redisguard.Del(f.key("n")), int64(1)},                                               // no argument
		{redisguard.Command("RPUSH", f.key("l"), "x", "y", "z"), int64(3)},                   // three
		{redisguard.Command("HDEL", f.key("h"), "a", "missing"), int64(1)},                   // two
		{redisguard.Command("hincrby", f.key("h"), "b", "40"), int64(42)},                    // two, lower case
		{redisguard.Command("SADD", f.key("set"), "m"), int64(1)},                            // one
	}
	for i, c := range cases {
		r, err := f.g.Exec(ctx, f.tgt, tok(5), c.cmd)
		if err != nil {
			t.Fatalf("%d %s: %v", i, c.cmd.Name(), err)
		}
		if len(r) != 1 || r[0] != c.want {
			t.Errorf("%d %s: replies %#v, want [%#v]", i, c.cmd.Name(), r, c.want)
		}
	}
	if got, err := f.cli.Get(ctx, f.key("s")).Result(); err != nil || got != "v" {
		t.Errorf("GET s = %q, %v; want v", got, err)
	}
	if ttl, err := f.cli.TTL(ctx, f.key("s")).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL s = %v, %v; want (0, 1m]", ttl, err)
	}
	if n, err := f.cli.Exists(ctx, f.key("n")).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS n = %d, %v; want 0", n, err)
	}
	if got, err := f.cli.HGetAll(ctx, f.key("h")).Result(); err != nil || len(got) != 1 || got["b"] != "42" {
		t.Errorf("HGETALL h = %v, %v; want map[b:42]", got, err)
	}
	if got, err := f.cli.LRange(ctx, f.key("l"), 0, -1).Result(); err != nil || len(got) != 3 || got[0] != "x" || got[2] != "z" {
		t.Errorf("LRANGE l = %v, %v; want [x y z]", got, err)
	}
	if mark, err := f.g.Mark(ctx, f.res); err != nil || mark != tok(5) {
		t.Errorf("mark = %v, %v; want %v", mark, err, tok(5))
	}
}
