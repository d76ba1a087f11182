package lease_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/lease"
)

// FuzzValidateName checks that ValidateName never panics, refuses with
// ErrInvalidName only, and accepts only names that are 1 to MaxNameLen
// bytes of UTF-8 with no "/" (the prefix separator) and no control
// character (C0, DEL and C1).
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"orders", "a/b", "", "bad\x00", "tab\there", "del\x7f", "c1\u0085", "ünïcödé", string([]byte{0xff}), strings.Repeat("x", lease.MaxNameLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := lease.ValidateName(name)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v, does not match ErrInvalidName", name, err)
			}
			return
		}
		switch {
		case name == "":
			t.Fatal("accepted the empty name")
		case len(name) > lease.MaxNameLen:
			t.Fatalf("accepted a name of %d bytes > MaxNameLen %d", len(name), lease.MaxNameLen)
		case !utf8.ValidString(name):
			t.Fatalf("accepted %q, not UTF-8", name)
		case strings.Contains(name, "/"):
			t.Fatalf("accepted %q, which contains \"/\"", name)
		}
		for _, r := range name {
			if unicode.IsControl(r) {
				t.Fatalf("accepted %q, which contains control character %U", name, r)
			}
		}
	})
}
