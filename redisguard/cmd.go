package redisguard

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxArgs bounds the arguments of one command: the script passes them to
// redis.pcall through Lua's unpack, whose limit is a few thousand values.
const maxArgs = 1024

// Cmd is one Redis command of a fenced write, made by Set, HSet, Del,
// IncrBy or Command. It is data: its name, key and arguments travel to
// the fenced script as KEYS and ARGV, never as script text. The zero Cmd
// is refused with ErrBadCommand.
type Cmd struct {
	name string
	key  string
	args []string
	err  error // from a constructor's options
}

// Set is SET key value with options (EX, PX, NX, XX, KeepTTL). Its reply
// in Guard.Exec is "OK", or nil when NX or XX kept it from setting.
func Set(key, value string, opts ...SetOption) Cmd {
	c := Cmd{name: "SET", key: key, args: []string{value}}
	for _, o := range opts {
		if o == nil {
			c.err = fmt.Errorf("%w: SET with a nil option", ErrBadCommand)
			return c
		}
		args, err := o.setArgs()
		if err != nil {
			c.err = err
			return c
		}
		c.args = append(c.args, args...)
	}
	return c
}

// HSet is HSET key field value [field value ...]. Its reply in Guard.Exec
// is the number of fields added (int64).
func HSet(key string, fieldValues ...string) Cmd {
	return Cmd{name: "HSET", key: key, args: fieldValues}
}

// Del is DEL key. Its reply in Guard.Exec is 1 when the key existed and 0
// otherwise (int64).
func Del(key string) Cmd { return Cmd{name: "DEL", key: key} }

// IncrBy is INCRBY key n. Its reply in Guard.Exec is the new value
// (int64).
func IncrBy(key string, n int64) Cmd {
	return Cmd{name: "INCRBY", key: key, args: []string{strconv.FormatInt(n, 10)}}
}

// Command is the generic form: the command name (any case) on key, with
// args. Only commands that write exactly one key, named by their first
// argument, and whose arguments can be checked before sending are
// allowed:
//
//	SET key value [EX s | PX ms | KEEPTTL] [NX | XX]
//	DEL key          INCR key         DECR key        PERSIST key
//	INCRBY key n     DECRBY key n     EXPIRE key s    PEXPIRE key ms
//	HSET key field value [field value ...]   HDEL key field [field ...]
//	HINCRBY key field n
//	LPUSH key value [value ...]   RPUSH key value [value ...]
//	SADD key member [member ...]  SREM key member [member ...]
//
// The list is fixed, and the reasons are the guarantees: with one key,
// in first position, every key a batch touches is declared to Redis
// (KEYS) and checked for the resource's hash slot before sending, and
// the script can snapshot it to undo the batch when a later command
// fails; commands with keys elsewhere (RENAME, LMOVE, SUNIONSTORE, ...)
// would hide keys from both. Commands that read only need no fencing;
// blocking, scripting, administrative and pub/sub commands cannot run in
// a script. Other names, and arguments of the wrong shape, are refused
// with ErrBadCommand before anything is sent.
func Command(name, key string, args ...string) Cmd {
	return Cmd{name: strings.ToUpper(name), key: key, args: args}
}

// Name returns the command's name, upper-case.
func (c Cmd) Name() string { return c.name }

// Key returns the key the command writes.
func (c Cmd) Key() string { return c.key }

// SetOption is an option of Set: EX, PX, KeepTTL, NX or XX.
type SetOption interface {
	setArgs() ([]string, error)
}

type setOption struct {
	args []string
	err  error
}

func (o setOption) setArgs() ([]string, error) { return o.args, o.err }

// EX sets the key's time to live, a positive whole number of seconds.
func EX(ttl time.Duration) SetOption {
	if ttl < time.Second || ttl%time.Second != 0 {
		return setOption{err: fmt.Errorf("%w: SET EX %v: not a positive whole number of seconds", ErrBadCommand, ttl)}
	}
	return setOption{args: []string{"EX", strconv.FormatInt(int64(ttl/time.Second), 10)}}
}

// PX sets the key's time to live, a positive whole number of
// milliseconds.
func PX(ttl time.Duration) SetOption {
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		return setOption{err: fmt.Errorf("%w: SET PX %v: not a positive whole number of milliseconds", ErrBadCommand, ttl)}
	}
	return setOption{args: []string{"PX", strconv.FormatInt(int64(ttl/time.Millisecond), 10)}}
}

// KeepTTL keeps the key's time to live (SET ... KEEPTTL).
func KeepTTL() SetOption { return setOption{args: []string{"KEEPTTL"}} }

// NX sets the key only if it does not exist.
func NX() SetOption { return setOption{args: []string{"NX"}} }

// XX sets the key only if it exists.
func XX() SetOption { return setOption{args: []string{"XX"}} }

// cmdSpec is the argument shape of an allowed command: the number of
// arguments after the key, and a check of them.
type cmdSpec struct {
	min, max int
	check    func(args []string) error
}

var allowed = map[string]cmdSpec{
	"SET":     {1, 5, checkSet},
	"DEL":     {0, 0, nil},
	"INCR":    {0, 0, nil},
	"DECR":    {0, 0, nil},
	"PERSIST": {0, 0, nil},
	"INCRBY":  {1, 1, intAt(0, false)},
	"DECRBY":  {1, 1, intAt(0, false)},
	"EXPIRE":  {1, 1, intAt(0, true)},
	"PEXPIRE": {1, 1, intAt(0, true)},
	"HSET":    {2, maxArgs, pairs},
	"HDEL":    {1, maxArgs, nil},
	"HINCRBY": {2, 2, intAt(1, false)},
	"LPUSH":   {1, maxArgs, nil},
	"RPUSH":   {1, maxArgs, nil},
	"SADD":    {1, maxArgs, nil},
	"SREM":    {1, maxArgs, nil},
}

// validate checks c against the allow-list.
func (c Cmd) validate() error {
	if c.err != nil {
		return c.err
	}
	spec, ok := allowed[c.name]
	if !ok {
		return fmt.Errorf("%w: %q is not on the allow-list", ErrBadCommand, c.name)
	}
	if c.key == "" {
		return fmt.Errorf("%w: %s with an empty key", ErrBadCommand, c.name)
	}
	if n := len(c.args); n < spec.min || n > spec.max {
		return fmt.Errorf("%w: %s takes %d to %d arguments after the key, got %d", ErrBadCommand, c.name, spec.min, spec.max, n)
	}
	if spec.check != nil {
		if err := spec.check(c.args); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadCommand, c.name, err)
		}
	}
	return nil
}

// intAt checks that args[i] is a decimal int64 (positive when positive
// is set), as Redis parses it.
func intAt(i int, positive bool) func([]string) error {
	return func(args []string) error {
		n, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != args[i] {
			return fmt.Errorf("argument %q is not an integer", args[i])
		}
		if positive && n <= 0 {
			return fmt.Errorf("argument %d is not positive", n)
		}
		return nil
	}
}

func pairs(args []string) error {
	if len(args)%2 != 0 {
		return fmt.Errorf("%d arguments do not make field-value pairs", len(args))
	}
	return nil
}

// checkSet checks SET's options: EX or PX with a positive integer, or
// KEEPTTL, at most one of them; NX or XX, at most one.
func checkSet(args []string) error {
	var ttl, cond bool
	for i := 1; i < len(args); i++ {
		switch o := strings.ToUpper(args[i]); o {
		case "EX", "PX":
			if ttl || i+1 >= len(args) {
				return fmt.Errorf("option %s: more than one expiry, or no value", o)
			}
			if err := intAt(i+1, true)(args); err != nil {
				return err
			}
			ttl = true
			i++
		case "KEEPTTL":
			if ttl {
				return fmt.Errorf("option %s with another expiry", o)
			}
			ttl = true
		case "NX", "XX":
			if cond {
				return fmt.Errorf("option %s with NX or XX", o)
			}
			cond = true
		default:
			return fmt.Errorf("option %q is not allowed (EX, PX, KEEPTTL, NX, XX)", args[i])
		}
	}
	return nil
}
