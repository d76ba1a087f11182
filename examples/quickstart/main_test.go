package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuickstart runs the whole story; run returns an error if any step
// did not happen as the output claims.
func TestQuickstart(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
