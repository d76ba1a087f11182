package objguard

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrConditionsIgnored reports an object store that did not refuse a
	// conditional request it should have refused: a PUT with a wrong
	// If-Match, a DELETE with a wrong If-Match, or a PUT with
	// If-None-Match: * on an existing key. Such a store cannot fence
	// writes. Errors matching it are *ProbeError.
	ErrConditionsIgnored = errors.New("objguard: object store ignores conditional requests")
	// ErrBadMark reports an object whose fencekit-token metadata is not a
	// fencing token's text: it was written outside the Guard. The Guard
	// neither overwrites nor deletes it; remove the metadata (or the
	// object) to let fenced writes proceed.
	ErrBadMark = errors.New("objguard: object carries a malformed fencing mark")
	// ErrContended reports a fenced write whose object kept changing
	// between the Guard's read and its conditional write, MaxAttempts
	// times in a row. Nothing was written by the last attempt.
	ErrContended = errors.New("objguard: object kept changing")
	// ErrNotFound reports an object that does not exist or is a
	// tombstone (deleted through the Guard), from Get.
	ErrNotFound = errors.New("objguard: object not found")
)

// MaxAttempts is how many times a fenced write reads the object and
// writes it conditionally before it gives up with ErrContended.
const MaxAttempts = 5

// ProbeError reports the conditional requests an object store did not
// refuse (see Probe). It matches ErrConditionsIgnored.
type ProbeError struct {
	// Ignored names each condition the store ignored: "If-Match on PUT",
	// "If-None-Match: * on PUT" or "If-Match on DELETE"; with "(answered
	// 412 but wrote)" when the store refused the request and applied it
	// anyway.
	Ignored []string
}

// Error names what the store ignored.
func (e *ProbeError) Error() string {
	return fmt.Sprintf("objguard: the object store ignored %s: it cannot fence writes", strings.Join(e.Ignored, ", "))
}

// Is reports whether target is ErrConditionsIgnored.
func (e *ProbeError) Is(target error) bool { return target == ErrConditionsIgnored }
