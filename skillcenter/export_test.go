package skillcenter

// Helpers for the external tests (package skillcenter_test).
var (
	SeedCatalog = seedCatalog
	NewClock    = newClock
	TestLogger  = testLogger
	Token       = token
	WaitFor     = waitFor
)

const TestSecret = testSecret

// Clock is the settable clock of the tests.
type Clock = fakeClock
