package seaweed_test

import (
	"testing"

	"github.com/strata-es/strata/internal/seaweed"
)

// TestStart: the server starts and takes an object (Start checks it).
func TestStart(t *testing.T) {
	s := seaweed.Start(t, "strata-seaweed-test")
	if s.Endpoint == "" {
		t.Fatal("no endpoint")
	}
}
