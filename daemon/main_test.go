package daemon_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a daemon starts ends with its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
