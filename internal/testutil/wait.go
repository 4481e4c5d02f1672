// Package testutil holds what the tests of several packages share: waiting
// for a condition with a deadline instead of sleeping for a guessed time.
//
// The rule agentd's tests follow: a test that runs on the wall clock never
// sleeps to let something happen; it waits for the event (a channel, a
// metric, a log line) with Eventually or Within. Inside a testing/synctest
// bubble, time.Sleep is how a test moves the virtual clock to a moment the
// behaviour under test is defined by (a record's expiry, a key's grace
// period, a rate limiter's interval, "nothing arrives for 30 s"): it costs
// no wall time and is exact, so it is neither slow nor flaky. Where such a
// test checks that something does happen, it still waits with Eventually.
package testutil

import (
	"testing"
	"time"
)

// DefaultPoll is how often Eventually checks its condition.
const DefaultPoll = 10 * time.Millisecond

// Eventually checks cond every DefaultPoll until it holds and returns how
// long that took; after d it fails t, naming what it waited for. Inside a
// testing/synctest bubble its ticker and deadline run on the bubble's
// virtual clock, so the wait costs no wall time.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return EventuallyEvery(t, d, DefaultPoll, what, cond)
}

// Within reports whether cond holds within d, checking it every
// DefaultPoll; for callers that do something other than fail when it does
// not (skip the test, report the time).
func Within(d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(DefaultPoll)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}

// EventuallyEvery is Eventually with a chosen polling interval (a finer one
// where a test measures how soon something happens).
func EventuallyEvery(t testing.TB, d, every time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	if cond() {
		return 0
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			if cond() {
				return time.Since(start)
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
			return time.Since(start)
		case <-tick.C:
			if cond() {
				return time.Since(start)
			}
		}
	}
}
