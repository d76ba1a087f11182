package redisguard

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/redis/go-redis/v9"
)

// fenceBody is the fenced function: it checks a token against a
// resource's mark, runs a batch of commands and advances the mark, as one
// call: Redis runs nothing else in between. The caller's commands arrive
// as data, never as code.
//
// KEYS[1] is the mark, a hash of "rev" (the revision, canonical decimal),
// "lock" (the lock name) and "life" (the run_id of the server that wrote
// it); KEYS[1+i] is the key of command i, so the batch has #KEYS-1
// commands. ARGV holds the token's revision and lock, the mode ("" decide
// only from the mark, "r" may raise the mark, "c" may claim: set a mark of
// an earlier server life, or none), and then the commands: a single
// command as its name and its arguments after the key (all the rest of
// ARGV), several as, per command, its name, its number of arguments after
// the key and those arguments. Every argument Redis receives is a string
// it converts into Lua, so a single write, the common case, carries no
// count at all.
//
// When the batch ran it returns the single command's reply as it is (no
// command of the allow-list replies with an array, and an array around
// the reply measurably slows a small write), OK for no command, and
// {"ok", reply...} for several. Otherwise it returns an array:
// {status, mark revision, mark lock} with status "stale", "wrong_lock",
// "verify" (the token would raise the mark and mode is ""), "unclaimed"
// (no mark of this life, and mode is not "c"), or {"error", index,
// message} for a command Redis refused, after undoing the batch's earlier
// commands (DUMP before each key's first command, RESTORE or DEL after).
// Revisions are compared as decimal strings, exactly for every int64. It
// calls older and server_life, which the library defines (see
// libraryCode). A single command of no or one argument is called without
// unpack, which measurably slows a small write.
const fenceBody = `
local rev, lock, mode = ARGV[1], ARGV[2], ARGV[3]
local m = redis.call('HMGET', KEYS[1], 'rev', 'lock', 'life')
local mrev, mlock = m[1], m[2]
local raise = false
if mrev then
  if mlock ~= lock then return {'wrong_lock', mrev, mlock} end
  if mrev ~= rev then
    if older(rev, mrev) then return {'stale', mrev, mlock} end
    raise = true
  end
end
local life = server_life()
if not mrev or m[3] ~= life then
  if mode ~= 'c' then return {'unclaimed', mrev or '', mlock or ''} end
  raise = true
elseif raise and mode == '' then
  return {'verify', mrev, mlock}
end
local n = #KEYS - 1
local out
if n == 1 then
  local last = #ARGV
  if last == 5 then
    out = redis.pcall(ARGV[4], KEYS[2], ARGV[5])
  elseif last == 4 then
    out = redis.pcall(ARGV[4], KEYS[2])
  else
    out = redis.pcall(ARGV[4], KEYS[2], unpack(ARGV, 5, last))
  end
  if type(out) == 'table' and out.err then return {'error', '0', out.err} end
elseif n == 0 then
  out = redis.status_reply('OK')
else
  out = {'ok'}
  local undo, seen = {}, {}
  local a = 4
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

// resetBody sets a mark to ARGV[3], ARGV[4] (revision, lock) if it is
// exactly ARGV[1], ARGV[2] ("", "" for none), stamped with the server's
// life. It returns {"ok"} or {"changed", revision, lock}.
const resetBody = `
local m = redis.call('HMGET', KEYS[1], 'rev', 'lock')
if (m[1] or '') ~= ARGV[1] or (m[2] or '') ~= ARGV[2] then
  return {'changed', m[1] or '', m[2] or ''}
end
redis.call('HSET', KEYS[1], 'rev', ARGV[3], 'lock', ARGV[4], 'life', server_life())
return {'ok'}
`

// olderLua compares two canonical decimal revisions: a < b.
const olderLua = `
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
`

// lifeLua is the body of a function returning the server's life, its
// run_id, read from INFO server.
const lifeLua = `
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  return string.sub(info, at + 7, at + 46)
`

// libraryCode is the Redis function library (Redis 7 functions) of
// fenceBody and resetBody. server_life reads INFO server once per loaded
// copy of the library and keeps the run_id in a local of the library,
// which lives only in the server's memory and starts empty whenever the
// server loads the library (at start, FUNCTION LOAD, RESTORE or FLUSH, a
// full sync): the kept value is always the running process's own run_id
// (package doc, Durability). The
// library's and the functions' names end in a digest of the code (see
// newLibrary), so that programs of different versions do not replace each
// other's.
const libraryCode = `#!lua name=@LIB@
local function read_life()` + lifeLua + `end
local life
local function server_life()
  if not life then life = read_life() end
  return life
end
` + olderLua + `
redis.register_function('@FENCE@', function(KEYS, ARGV)` + fenceBody + `end)
redis.register_function('@RESET@', function(KEYS, ARGV)` + resetBody + `end)
`

// library is the function library as loaded: its code and names.
type library struct {
	code         string
	name         string // the library's
	fence, reset string // the functions'
}

// lib is the library this package loads and calls.
var lib = newLibrary(libraryCode)

// newLibrary names the library and its functions after a digest of code
// and returns the code to load.
func newLibrary(code string) library {
	sum := sha1.Sum([]byte(code))
	v := hex.EncodeToString(sum[:6])
	l := library{name: "fencekit_" + v, fence: "fencekit_fence_" + v, reset: "fencekit_reset_" + v}
	l.code = strings.NewReplacer("@LIB@", l.name, "@FENCE@", l.fence, "@RESET@", l.reset).Replace(code)
	return l
}

// The modes of fenceBody.
const (
	modeDecide = ""  // decide from the mark; a raise needs verification
	modeRaise  = "r" // may raise the mark
	modeClaim  = "c" // may claim the resource in this server life
)

// The statuses of fenceBody.
const (
	statusOK        = "ok"
	statusStale     = "stale"
	statusWrongLock = "wrong_lock"
	statusVerify    = "verify"
	statusUnclaimed = "unclaimed"
	statusError     = "error"
)

// call runs an FCALL of a function of the library (args as fcall takes
// them) and returns its reply (nil for a nil reply). When the server does
// not have the library (a new server, a restart without persistence,
// FUNCTION FLUSH) it loads it on the server of KEYS[1] and calls again.
func (m *marks) call(ctx context.Context, args []any) (any, error) {
	v, err := fcall(ctx, m.cli, args)
	if err == nil {
		return v, nil
	}
	if strings.HasPrefix(err.Error(), "ERR unknown command") {
		return nil, fmt.Errorf("the server has no Redis functions (FCALL, Redis 7.0 or later; or the command is renamed): %w", err)
	}
	if !strings.HasPrefix(err.Error(), "ERR Function not found") {
		return nil, err
	}
	if err := m.load(ctx, args[fcallKeys].(string)); err != nil {
		return nil, fmt.Errorf("load function library %s: %w", lib.name, err)
	}
	return fcall(ctx, m.cli, args)
}

// fcallKeys is the index of KEYS[1] in an FCALL command's arguments (see
// fcallArgs).
const fcallKeys = 3

// fcallArgs returns the start of an FCALL command's arguments: "FCALL",
// function fn and the number of keys, in a slice with room for the keys
// and argv more arguments, which the caller appends: one slice per call,
// handed to go-redis as it is (its FCall would copy keys and arguments
// into a slice of its own on every call).
func fcallArgs(fn any, keys, argv int) []any {
	args := make([]any, fcallKeys, fcallKeys+keys+argv)
	args[0], args[1], args[2] = "FCALL", fn, keys
	return args
}

// fcall runs the FCALL command of args (made by fcallArgs, with at least
// one key: a cluster client routes the command by KEYS[1]); a nil reply is
// nil, not redis.Nil.
func fcall(ctx context.Context, cli redis.UniversalClient, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(fcallKeys)
	_ = cli.Process(ctx, cmd)
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// load loads the library on the server that holds key: on a cluster the
// master of key's slot, on a ring every shard. A library already loaded
// (by another client meanwhile) is not an error.
func (m *marks) load(ctx context.Context, key string) error {
	switch c := m.cli.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		return loadOn(ctx, node)
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
			return loadOn(ctx, shard)
		})
	}
	return loadOn(ctx, m.cli)
}

// loadOn loads the library with FUNCTION LOAD through c.
func loadOn(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, lib.code).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

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

// batch is a fenced call's FCALL command (see fcallArgs) for fenceBody:
// its KEYS and ARGV, whose first three (the token's revision and lock, and
// the mode) fence sets before each run.
type batch struct {
	args []any
	argv int // the index of ARGV[1] in args
}

// fenceFn is the fenced function's name, boxed once for every call.
var fenceFn any = lib.fence

// encode checks cmds for resource and lays them out for fenceBody.
func (m *marks) encode(resource string, cmds []Cmd) (batch, error) {
	mk := m.markKey(resource)
	slot := Slot(mk)
	argv := 3
	for _, c := range cmds {
		argv += 2 + len(c.args)
	}
	args := append(fcallArgs(fenceFn, 1+len(cmds), argv), mk)
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
		args = append(args, c.key)
	}
	b := batch{argv: len(args)}
	args = append(args, nil, nil, nil) // revision, lock, mode: set by fence
	for _, c := range cmds {
		args = append(args, c.name)
		if len(cmds) > 1 {
			args = append(args, len(c.args))
		}
		for _, a := range c.args {
			args = append(args, a)
		}
	}
	b.args = args
	return b, nil
}

// result is fenceBody's answer.
type result struct {
	status  string
	mark    fence.Token // for the statuses other than ok and error
	replies []any       // ok: one per command
	cmdErr  *CommandError
}

// fence runs fenceBody for t on b in mode.
func (m *marks) fence(ctx context.Context, resource string, t fence.Token, mode string, b batch, cmds []Cmd) (result, error) {
	b.args[b.argv], b.args[b.argv+1], b.args[b.argv+2] = strconv.FormatInt(t.Revision, 10), t.Lock, mode
	reply, err := m.call(ctx, b.args)
	if err != nil {
		return result{}, fmt.Errorf("redisguard: fenced function: %w", err)
	}
	v, isArray := reply.([]any)
	if !isArray { // the batch ran: the single command's reply, or OK
		if len(cmds) > 1 {
			return result{}, fmt.Errorf("redisguard: fenced function: reply %v", reply)
		}
		if len(cmds) == 0 {
			return result{status: statusOK}, nil
		}
		return result{status: statusOK, replies: []any{reply}}, nil
	}
	if len(v) == 0 {
		return result{}, fmt.Errorf("redisguard: fenced function: empty reply")
	}
	status, _ := v[0].(string)
	switch status {
	case statusOK:
		return result{status: status, replies: v[1:]}, nil
	case statusError:
		if len(v) != 3 {
			return result{}, fmt.Errorf("redisguard: fenced function: reply %v", v)
		}
		i, _ := strconv.Atoi(fmt.Sprint(v[1]))
		ce := &CommandError{Resource: resource, Index: i, Msg: fmt.Sprint(v[2])}
		if i >= 0 && i < len(cmds) {
			ce.Name = cmds[i].name
		}
		return result{status: status, cmdErr: ce}, nil
	case statusStale, statusWrongLock, statusVerify, statusUnclaimed:
		if len(v) != 3 {
			return result{}, fmt.Errorf("redisguard: fenced function: reply %v", v)
		}
		mark, err := parseMark(fmt.Sprint(v[1]), fmt.Sprint(v[2]))
		if err != nil {
			return result{}, fmt.Errorf("redisguard: mark of %q: %w", resource, err)
		}
		return result{status: status, mark: mark}, nil
	}
	return result{}, fmt.Errorf("redisguard: fenced function: reply %v", v)
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

// reset runs resetBody: it sets the mark from old to next, or returns an
// error matching fence.ErrMarkChanged.
func (m *marks) reset(ctx context.Context, resource string, old, next fence.Token) error {
	oldRev := ""
	if !old.IsZero() {
		oldRev = strconv.FormatInt(old.Revision, 10)
	}
	args := append(fcallArgs(lib.reset, 1, 4), m.markKey(resource),
		oldRev, old.Lock, strconv.FormatInt(next.Revision, 10), next.Lock)
	reply, err := m.call(ctx, args)
	if err != nil {
		return fmt.Errorf("redisguard: reset mark: %w", err)
	}
	v, _ := reply.([]any)
	if len(v) == 1 && v[0] == statusOK {
		return nil
	}
	if len(v) != 3 || v[0] != "changed" {
		return fmt.Errorf("redisguard: reset function: reply %v", v)
	}
	mark, err := parseMark(fmt.Sprint(v[1]), fmt.Sprint(v[2]))
	if err != nil {
		return fmt.Errorf("redisguard: mark of %q: %w", resource, err)
	}
	return fmt.Errorf("redisguard: mark of %q is %s, not %s: not reset: %w", resource, mark, old, fence.ErrMarkChanged)
}

// refusal returns the error of fence.Check for a status of fenceBody
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
