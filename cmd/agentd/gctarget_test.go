package main

import (
	"runtime/debug"
	"testing"
)

func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live      uint64
		cur, want int
	}{
		{0, daemonGOGC, daemonGOGC},
		{30 << 20, daemonLargeGOGC, daemonGOGC},       // small again
		{smallHeap, daemonGOGC, daemonGOGC},           // in the band: kept
		{smallHeap, daemonLargeGOGC, daemonLargeGOGC}, // in the band: kept
		{largeHeap - 1, daemonGOGC, daemonGOGC},       // in the band: kept
		{largeHeap, daemonGOGC, daemonLargeGOGC},      // large
		{1 << 30, daemonLargeGOGC, daemonLargeGOGC},   // still large
		{smallHeap - 1, daemonLargeGOGC, daemonGOGC},  // below the band
	} {
		if got := gcPercentFor(c.live, c.cur); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d) = %d, want %d", c.live>>20, c.cur, got, c.want)
		}
	}
}

// startGCTarget sets the small-heap target at once (this test's heap is
// small) and stop ends its goroutine.
func TestGCTargetStartStop(t *testing.T) {
	old := debug.SetGCPercent(daemonStartGOGC)
	defer debug.SetGCPercent(old)
	g := startGCTarget()
	g.stop()
	if got := debug.SetGCPercent(old); got != daemonGOGC {
		t.Fatalf("GC target %d after start, want %d", got, daemonGOGC)
	}
}
