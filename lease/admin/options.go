package admin

import (
	"errors"
	"log/slog"
)

// An Option configures an Admin (see New).
type Option interface {
	apply(a *Admin) error
}

type optionFunc func(a *Admin) error

func (f optionFunc) apply(a *Admin) error { return f(a) }

// WithLogger sets the logger of the Admin's log records: a force release
// (Warn) and a release request (Info). Without it they are discarded; a
// process that holds locks usually passes its lease.Client's logger.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(a *Admin) error {
		if l == nil {
			return errors.New("lease/admin: nil logger")
		}
		a.log = l
		return nil
	})
}
