package view

import (
	"testing"
	"time"
	"unsafe"
)

// A registry's view holds an agentState and a textDoc per agent. The
// state's moments are instants, not time.Time values, which keeps it in
// the 112-byte size class (160 with three time.Time fields); a textDoc
// takes its agent id from its record (16 bytes, not 32).
func TestPerAgentStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(agentState{}); n > 112 {
		t.Errorf("agentState is %d bytes, want at most 112", n)
	}
	if n := unsafe.Sizeof(textDoc{}); n > 16 {
		t.Errorf("textDoc is %d bytes, want at most 16", n)
	}
}

// An instant gives its moment back: on the monotonic clock for time.Now,
// and on the wall clock for a moment read from elsewhere (an injected
// clock, a record's issue time), before or after the epoch.
func TestInstantRoundTrip(t *testing.T) {
	v := New(Config{}, nil, nil, nil, nil)
	now := time.Now()
	for _, at := range []time.Time{
		now,
		now.Add(-90 * 24 * time.Hour),
		now.Add(3 * time.Hour),
		time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC),
	} {
		if got := v.time(v.at(at)); !got.Equal(at) {
			t.Errorf("%v came back as %v", at, got)
		}
	}
	later := time.Now()
	if d := time.Duration(v.at(later) - v.at(now)); d != later.Sub(now) {
		t.Errorf("instants %v apart, the times %v", d, later.Sub(now))
	}
}
