package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestRecentCache(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newRecentCache(time.Minute, 3)
		k := func(b byte) [32]byte { return [32]byte{b} }
		if c.claim(k(1), "a") {
			t.Fatal("first claim is a duplicate")
		}
		if c.claim(k(1), "a") {
			t.Fatal("same topic again is not a cross-topic duplicate")
		}
		if !c.claim(k(1), "b") {
			t.Fatal("the same payload on another topic must be a duplicate")
		}
		c.release(k(1), "b") // not b's: no effect
		if !c.claim(k(1), "b") {
			t.Fatal("release by another topic dropped the entry")
		}
		c.release(k(1), "a")
		if c.claim(k(1), "b") {
			t.Fatal("a released payload is still held")
		}
		time.Sleep(time.Minute)
		if c.claim(k(1), "c") {
			t.Fatal("an expired entry still counts")
		}
		for i := range byte(10) {
			c.claim(k(10+i), "a")
		}
		if len(c.m) > 3 {
			t.Fatalf("cache holds %d entries, bound 3", len(c.m))
		}
	})
}

type countingSink struct {
	*fakeSink
	calls chan string
}

func (s *countingSink) UnknownAgent(id string, _ peer.ID) { s.calls <- id }

func TestUnknownQueue(t *testing.T) {
	bubble(t, func(t *testing.T) {
		u := newUnknownQueue(4 * time.Second)
		for range 5 {
			u.request("agent-1", "p")
		}
		u.request("agent-2", "p")
		if len(u.ch) != 2 {
			t.Fatalf("queued %d requests, want 2 (one per agent)", len(u.ch))
		}
		time.Sleep(4 * time.Second)
		u.request("agent-1", "p")
		if len(u.ch) != 3 {
			t.Fatalf("after the backoff: %d queued, want 3", len(u.ch))
		}
		// A full queue drops the request without remembering it, so the
		// next beat retries.
		for i := range unknownQueueLen {
			u.request(string(rune('A'+i%26))+time.Duration(i).String(), "p")
		}
		if len(u.ch) != unknownQueueLen {
			t.Fatalf("queue length %d", len(u.ch))
		}
		u.request("agent-late", "p")
		if _, ok := u.last["agent-late"]; ok {
			t.Fatal("a dropped request is remembered")
		}
		sink := &countingSink{fakeSink: newFakeSink(), calls: make(chan string, unknownQueueLen+8)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); u.work(ctx, sink) }()
		if got := <-sink.calls; got != "agent-1" {
			t.Fatalf("first call for %q", got)
		}
		cancel()
		<-done
	})
}
