package peerlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// TestTable: a peer gets its burst, then waits; a full table of busy
// peers refuses a new one; a full table forgets its idle peers (full
// buckets) to make room.
func TestTable(t *testing.T) {
	const max = 64
	tb := New(rate.Every(time.Hour), 2, max)
	a := peer.ID("a")
	var got []bool
	for range 3 {
		got = append(got, tb.Allow(a))
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("a burst of 2: %v", got)
	}
	for i := range max - 1 {
		if !tb.Allow(peer.ID(fmt.Sprint("busy-", i))) {
			t.Fatalf("peer %d refused before the table was full", i)
		}
	}
	if tb.Allow(peer.ID("new")) {
		t.Fatal("a new peer admitted to a full table of busy peers")
	}
	for i := range max / 2 {
		tb.m[peer.ID(fmt.Sprint("busy-", i))] = rate.NewLimiter(rate.Every(time.Hour), 2) // refilled: idle
	}
	if !tb.Allow(peer.ID("new")) {
		t.Fatal("a new peer refused although half the table is idle")
	}
	if got := tb.Len(); got != max-max/2+1 {
		t.Fatalf("table holds %d peers, want the busy ones and the new one (%d)", got, max-max/2+1)
	}
}
