package testutil

import (
	"os"
	"testing"
)

// SkipEnv skips a test whose environment cannot run it (no root, no
// network namespaces, a missing tool such as Avahi or openssl), saying so
// loudly — except where the CI environment variable is set: CI installs
// everything these tests need (.ci/run), so a failure to set it up there
// is a failure of the test, not a reason to pass without running it.
func SkipEnv(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so this test must run: "+format, args...)
	}
	t.Skipf(format, args...)
}
