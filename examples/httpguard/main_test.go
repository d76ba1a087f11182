package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHTTPGuardExample runs the example; run returns an error when a step
// did not happen as the output says.
func TestHTTPGuardExample(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
