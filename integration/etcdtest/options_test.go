package etcdtest

import (
	"errors"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   Option
		field string
	}{
		{"no members", WithMembers(0), "Members"},
		{"too many members", WithMembers(MaxMembers + 1), "Members"},
		{"sub-millisecond tick", WithTiming(500*time.Microsecond, time.Second), "TickInterval"},
		{"election below 5 ticks", WithTiming(100*time.Millisecond, 200*time.Millisecond), "ElectionTimeout"},
		{"empty password", WithAuth(""), "RootPassword"},
	} {
		err := tc.opt.apply(&Config{})
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Field != tc.field {
			t.Errorf("%s: %v, want a *ConfigError for %s", tc.name, err, tc.field)
		}
	}
	var cfg Config
	for _, o := range []Option{WithMembers(3), WithTiming(20*time.Millisecond, 200*time.Millisecond), WithoutFsync(), WithUnixSockets(), WithTLS(), WithAuth("pw"), WithLogger(nil)} {
		if err := o.apply(&cfg); err != nil {
			t.Fatal(err)
		}
	}
	want := Config{Members: 3, TickInterval: 20 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, NoFsync: true, UnixSockets: true, TLS: true, RootPassword: "pw"}
	if cfg != want {
		t.Errorf("options gave %+v, want %+v", cfg, want)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Members != 1 || cfg.TickInterval != DefaultTickInterval || cfg.ElectionTimeout != DefaultElectionTimeout {
		t.Errorf("defaults %+v", cfg)
	}
	// A slower tick alone gets an election timeout of 10 ticks.
	cfg, err = Config{TickInterval: 50 * time.Millisecond}.withDefaults()
	if err != nil || cfg.ElectionTimeout != 500*time.Millisecond {
		t.Errorf("tick 50ms: election %v, %v; want 500ms", cfg.ElectionTimeout, err)
	}
}
