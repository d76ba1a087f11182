package guard

import (
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/observe"
)

// markAheadMsg is the log message and span status of outcome mark_ahead.
const markAheadMsg = "guard: mark ahead of the lock service; reset it (Guard.ResetMark)"

// spec is how a Guard observes its decisions (see WithMetrics, WithLogger
// and WithTracerProvider): the counter's outcome label takes the words of
// fence.Outcome; the resource label exists only with WithResourceLabel.
func spec(resourceLabel bool) observe.Spec {
	help := "Fencing decisions by outcome: accepted, stale, wrong_lock, mark_ahead (stale, but the current holder's: reset the mark), unverified (newer token the verifier did not confirm), missing, malformed, failed (store or verifier error, invalid target or request ended while waiting)."
	if resourceLabel {
		help += " Labelled with the resource name."
	}
	return observe.Spec{
		Package:       "guard",
		Help:          help,
		Outcomes:      fence.Outcomes(),
		ResourceLabel: resourceLabel,
		Reports: map[fence.Outcome]observe.Report{
			fence.Missing:   {Level: slog.LevelWarn, Msg: "guard: fencing token missing", Status: "guard: fencing token missing"},
			fence.MarkAhead: {Level: slog.LevelError, Msg: markAheadMsg, Status: markAheadMsg, Error: true},
		},
	}
}
