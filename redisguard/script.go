package redisguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/redis/go-redis/v9"
)

// fenceScript checks a token against a resource's mark, runs a batch of
// commands and advances the mark, as one script: Redis runs nothing else
// in between. The caller's commands arrive as data, never as script text.
//
// KEYS[1] is the mark, a hash of "rev" (the revision, canonical decimal),
// "lock" (the lock name) and "life" (the run_id of the server that wrote
// it); KEYS[1+i] is the key of command i. ARGV holds the token's revision
// and lock, the mode ("" decide only from the mark, "r" may raise the
// mark, "c" may claim: set a mark of an earlier server life, or none),
// the number of commands, and then per command its name, its number of
// arguments after the key and those arguments.
//
// It returns {"ok", reply...}, or {status, mark revision, mark lock} with
// status "stale", "wrong_lock", "verify" (the token would raise the mark
// and mode is ""), "unclaimed" (no mark of this life, and mode is not
// "c"), or {"error", index, message} for a command Redis refused, after
// undoing the batch's earlier commands (DUMP before each key's first
// command, RESTORE or DEL after). Revisions are compared as decimal
// strings, exactly for every int64.
const fenceScript = `
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local rev, lock, mode = ARGV[1], ARGV[2], ARGV[3]
local m = redis.call('HMGET', KEYS[1], 'rev', 'lock', 'life')
if m[1] then
  if m[2] ~= lock then return {'wrong_lock', m[1], m[2]} end
  if older(rev, m[1]) then return {'stale', m[1], m[2]} end
end
local info = redis.call('INFO', 'server')
local at = string.find(info, 'run_id:', 1, true)
local life = string.sub(info, at + 7, at + 46)
local claimed = m[1] and m[3] == life
local raise = not claimed or older(m[1], rev)
if not claimed then
  if mode ~= 'c' then return {'unclaimed', m[1] or '', m[2] or ''} end
elseif raise and mode == '' then
  return {'verify', m[1], m[2]}
end
local n = tonumber(ARGV[4])
local out = {'ok'}
if n == 1 then
  local r = redis.pcall(ARGV[5], KEYS[2], unpack(ARGV, 7, 6 + tonumber(ARGV[6])))
  if type(r) == 'table' and r.err then return {'error', '0', r.err} end
  out[2] = r
elseif n > 1 then
  local undo, seen = {}, {}
  local a = 5
  for i = 1, n do
    local key, argc = KEYS[1 + i], tonumber(ARGV[a + 1])
    if not seen[key] then
      seen[key] = true
      local d = redis.call('DUMP', key)
      undo[#undo + 1] = {key, d, d and redis.call('PTTL', key)}
    end
    local r = redis.pcall(ARGV[a], key, unpack(ARGV, a + 2, a + 1 + argc))
    a = a + 2 + argc
    if type(r) == 'table' and r.err then
      for u = #undo, 1, -1 do
        local k, d, ttl = undo[u][1], undo[u][2], undo[u][3]
        if d then
          if ttl < 0 then ttl = 0 end
          redis.call('RESTORE', k, ttl, d, 'REPLACE')
        else
          redis.call('DEL', k)
        end
      end
      return {'error', tostring(i - 1), r.err}
    end
    out[i + 1] = r
  end
end
if raise then
  redis.call('HSET', KEYS[1], 'rev', rev, 'lock', lock, 'life', life)
end
return out
`

// resetScript sets a mark to ARGV[3], ARGV[4] (revision, lock) if it is
// exactly ARGV[1], ARGV[2] ("", "" for none), stamped with the server's
// life. It returns {"ok"} or {"changed", revision, lock}.
const resetScript = `
local m = redis.call('HMGET', KEYS[1], 'rev', 'lock')
if (m[1] or '') ~= ARGV[1] or (m[2] or '') ~= ARGV[2] then
  return {'changed', m[1] or '', m[2] or ''}
end
local info = redis.call('INFO', 'server')
local at = string.find(info, 'run_id:', 1, true)
local life = string.sub(info, at + 7, at + 46)
redis.call('HSET', KEYS[1], 'rev', ARGV[3], 'lock', ARGV[4], 'life', life)
return {'ok'}
`

var (
	fenceLua = redis.NewScript(fenceScript)
	resetLua = redis.NewScript(resetScript)
)

// The modes of fenceScript.
const (
	modeDecide = ""  // decide from the mark; a raise needs verification
	modeRaise  = "r" // may raise the mark
	modeClaim  = "c" // may claim the resource in this server life
)

// The statuses of fenceScript.
const (
	statusOK        = "ok"
	statusStale     = "stale"
	statusWrongLock = "wrong_lock"
	statusVerify    = "verify"
	statusUnclaimed = "unclaimed"
	statusError     = "error"
)

// marks is what Guard and Store share: the client and the key layout.
type marks struct {
	cli    redis.UniversalClient
	prefix string
}

// markKey returns the key of the resource's mark: the prefix, then the
// resource name as the hash tag.
func (m *marks) markKey(resource string) string { return m.prefix + "{" + resource + "}" }

// validateResource checks a resource name: not empty, no hash-tag braces.
func validateResource(resource string) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", guard.ErrInvalidTarget)
	}
	if strings.ContainsAny(resource, "{}") {
		return fmt.Errorf("%w: resource name %q contains \"{\" or \"}\"", guard.ErrInvalidTarget, resource)
	}
	return nil
}

// validatePrefix checks a mark key prefix: no hash-tag braces.
func validatePrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("redisguard: key prefix %q contains \"{\" or \"}\"", prefix)
	}
	return nil
}

// batch is a fenced script's KEYS and the commands' part of ARGV.
type batch struct {
	keys []string
	args []any
}

// encode checks cmds for resource and lays them out for fenceScript.
func (m *marks) encode(resource string, cmds []Cmd) (batch, error) {
	mk := m.markKey(resource)
	slot := Slot(mk)
	b := batch{keys: make([]string, 1, 1+len(cmds)), args: make([]any, 0, 1+3*len(cmds))}
	b.keys[0] = mk
	b.args = append(b.args, len(cmds))
	for i, c := range cmds {
		if err := c.validate(); err != nil {
			return batch{}, fmt.Errorf("command %d: %w", i, err)
		}
		if c.key == mk {
			return batch{}, fmt.Errorf("%w: command %d (%s) writes the resource's mark", ErrBadCommand, i, c.name)
		}
		if s := Slot(c.key); s != slot {
			return batch{}, fmt.Errorf("%w: command %d (%s): key %q is in slot %d, resource %q in slot %d (use Key)",
				ErrCrossSlot, i, c.name, c.key, s, resource, slot)
		}
		b.keys = append(b.keys, c.key)
		b.args = append(b.args, c.name, len(c.args))
		for _, a := range c.args {
			b.args = append(b.args, a)
		}
	}
	return b, nil
}

// result is fenceScript's answer.
type result struct {
	status  string
	mark    fence.Token // for the statuses other than ok and error
	replies []any       // ok: one per command
	cmdErr  *CommandError
}

// fence runs fenceScript for t on b in mode.
func (m *marks) fence(ctx context.Context, resource string, t fence.Token, mode string, b batch, cmds []Cmd) (result, error) {
	args := make([]any, 0, 3+len(b.args))
	args = append(args, strconv.FormatInt(t.Revision, 10), t.Lock, mode)
	args = append(args, b.args...)
	v, err := fenceLua.Run(ctx, m.cli, b.keys, args...).Slice()
	if err != nil {
		return result{}, fmt.Errorf("redisguard: fenced script: %w", err)
	}
	if len(v) == 0 {
		return result{}, fmt.Errorf("redisguard: fenced script: empty reply")
	}
	status, _ := v[0].(string)
	switch status {
	case statusOK:
		return result{status: status, replies: v[1:]}, nil
	case statusError:
		if len(v) != 3 {
			return result{}, fmt.Errorf("redisguard: fenced script: reply %v", v)
		}
		i, _ := strconv.Atoi(fmt.Sprint(v[1]))
		ce := &CommandError{Resource: resource, Index: i, Msg: fmt.Sprint(v[2])}
		if i >= 0 && i < len(cmds) {
			ce.Name = cmds[i].name
		}
		return result{status: status, cmdErr: ce}, nil
	case statusStale, statusWrongLock, statusVerify, statusUnclaimed:
		if len(v) != 3 {
			return result{}, fmt.Errorf("redisguard: fenced script: reply %v", v)
		}
		mark, err := parseMark(fmt.Sprint(v[1]), fmt.Sprint(v[2]))
		if err != nil {
			return result{}, fmt.Errorf("redisguard: mark of %q: %w", resource, err)
		}
		return result{status: status, mark: mark}, nil
	}
	return result{}, fmt.Errorf("redisguard: fenced script: reply %v", v)
}

// parseMark reads a mark's fields; "", "" is no mark.
func parseMark(rev, lock string) (fence.Token, error) {
	if rev == "" && lock == "" {
		return fence.Token{}, nil
	}
	n, err := strconv.ParseInt(rev, 10, 64)
	t := fence.Token{Lock: lock, Revision: n}
	if err == nil {
		err = t.Validate()
	}
	if err != nil {
		return fence.Token{}, fmt.Errorf("stored mark %q, %q: %w", rev, lock, err)
	}
	return t, nil
}

// mark reads the resource's mark; the zero Token when it has none.
func (m *marks) mark(ctx context.Context, resource string) (fence.Token, error) {
	v, err := m.cli.HMGet(ctx, m.markKey(resource), "rev", "lock").Result()
	if err != nil {
		return fence.Token{}, fmt.Errorf("redisguard: read mark of %q: %w", resource, err)
	}
	rev, _ := v[0].(string)
	lock, _ := v[1].(string)
	t, err := parseMark(rev, lock)
	if err != nil {
		return fence.Token{}, fmt.Errorf("redisguard: mark of %q: %w", resource, err)
	}
	return t, nil
}

// reset runs resetScript: it sets the mark from old to next, or returns a
// an error matching fence.ErrMarkChanged.
func (m *marks) reset(ctx context.Context, resource string, old, next fence.Token) error {
	oldRev := ""
	if !old.IsZero() {
		oldRev = strconv.FormatInt(old.Revision, 10)
	}
	v, err := resetLua.Run(ctx, m.cli, []string{m.markKey(resource)},
		oldRev, old.Lock, strconv.FormatInt(next.Revision, 10), next.Lock).Slice()
	if err != nil {
		return fmt.Errorf("redisguard: reset mark: %w", err)
	}
	if len(v) == 1 && v[0] == statusOK {
		return nil
	}
	if len(v) != 3 || v[0] != "changed" {
		return fmt.Errorf("redisguard: reset script: reply %v", v)
	}
	mark, err := parseMark(fmt.Sprint(v[1]), fmt.Sprint(v[2]))
	if err != nil {
		return fmt.Errorf("redisguard: mark of %q: %w", resource, err)
	}
	return fmt.Errorf("redisguard: mark of %q is %s, not %s: not reset: %w", resource, mark, old, fence.ErrMarkChanged)
}

// refusal returns the error of fence.Check for a status of fenceScript
// that refused t, or nil.
func refusal(resource, status string, mark, t fence.Token) error {
	o := fence.Stale
	if status == statusWrongLock {
		o = fence.WrongLock
	}
	return &fence.RefusedError{Outcome: o, Resource: resource, Lock: mark.Lock, Token: t, Mark: mark}
}

// unverified is the refusal of t, for resource with mark, by a verifier
// whose answer err matches fence.ErrUnverified: the verifier's own
// *fence.RefusedError (lease.Verifier's) named for the resource, or a new
// one around err.
func unverified(resource string, t, mark fence.Token, err error) error {
	var r *fence.RefusedError
	if !errors.As(err, &r) || r.Outcome != fence.Unverified {
		return &fence.RefusedError{Outcome: fence.Unverified, Resource: resource, Lock: t.Lock, Token: t, Mark: mark, Err: err}
	}
	named := *r
	named.Resource, named.Lock, named.Token, named.Mark = resource, t.Lock, t, mark
	return &named
}

// unclaimed returns the error for a resource without a mark of this
// server's life.
func unclaimed(resource string, mark fence.Token) error {
	if mark.IsZero() {
		return fmt.Errorf("%w: resource %q has no mark: %w", ErrUnclaimed, resource, fence.ErrNoMark)
	}
	return fmt.Errorf("%w: resource %q has mark %s from an earlier life of the server (restart or failover): %w",
		ErrUnclaimed, resource, mark, fence.ErrNoMark)
}
