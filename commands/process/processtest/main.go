package processtest

import (
	"testing"

	"github.com/strata-es/strata/internal/pgtest"
)

// Main runs a test binary's tests and then stops the PostgreSQL the kit
// started for them (one private cluster per test binary, unless
// TEST_DATABASE_URL names a server) and removes its directory. Call it
// from TestMain in every package whose tests use NewRuntime:
//
//	func TestMain(m *testing.M) { processtest.Main(m) }
func Main(m *testing.M) { pgtest.Main(m) }
