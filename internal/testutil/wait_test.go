package testutil

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestEventually: it returns as soon as the condition holds (in virtual
// time: at the first poll after the condition became true), and fails the
// test when the deadline passes first.
func TestEventually(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ready atomic.Bool
		time.AfterFunc(95*time.Millisecond, func() { ready.Store(true) })
		if took := Eventually(t, time.Second, "ready", ready.Load); took != 100*time.Millisecond {
			t.Fatalf("took %s, want the first poll after 95 ms (100 ms)", took)
		}
		if took := Eventually(t, time.Second, "already", func() bool { return true }); took != 0 {
			t.Fatalf("took %s for a condition that held at once", took)
		}
	})
	ft := &fakeT{TB: t}
	synctest.Test(t, func(*testing.T) {
		EventuallyEvery(ft, time.Second, time.Millisecond, "never", func() bool { return false })
	})
	if ft.failed != "timed out after 1s waiting for never" {
		t.Fatalf("failure %q", ft.failed)
	}
}

type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = sprintf(format, args...)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
