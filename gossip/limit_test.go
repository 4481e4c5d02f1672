package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// TestPeerLimits: a peer gets its burst, then waits; a full table of busy
// peers refuses a new one; a full table forgets its idle peers (full
// buckets) to make room.
func TestPeerLimits(t *testing.T) {
	pl := newPeerLimits(time.Hour, 2)
	a := peer.ID("a")
	var got []bool
	for range 3 {
		got = append(got, pl.allow(a))
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("a burst of 2: %v", got)
	}
	for i := range maxLimiters - 1 {
		if !pl.allow(peer.ID(fmt.Sprint("busy-", i))) {
			t.Fatalf("peer %d refused before the table was full", i)
		}
	}
	if pl.allow(peer.ID("new")) {
		t.Fatal("a new peer admitted to a full table of busy peers")
	}
	for i := range maxLimiters / 2 {
		pl.m[peer.ID(fmt.Sprint("busy-", i))] = rate.NewLimiter(rate.Every(time.Hour), 2) // refilled: idle
	}
	if !pl.allow(peer.ID("new")) {
		t.Fatal("a new peer refused although half the table is idle")
	}
	if got := len(pl.m); got != maxLimiters-maxLimiters/2+1 {
		t.Fatalf("table holds %d peers, want the busy ones and the new one (%d)", got, maxLimiters-maxLimiters/2+1)
	}
}
