package simnet

import (
	"runtime"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bubble runs f in virtual time. Under -race the bubble runs with
// GOMAXPROCS(1), as go-libp2p-pubsub's own tests do (golang/go#78156).
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}
