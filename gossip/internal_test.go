package gossip

import (
	"context"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

func TestRecentCache(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newRecentCache(time.Minute, 3)
		k := func(b byte) [32]byte { return [32]byte{b} }
		if c.claim(k(1), "a", false) {
			t.Fatal("first claim is a duplicate")
		}
		if c.claim(k(1), "a", false) {
			t.Fatal("same topic again is not a cross-topic duplicate")
		}
		if !c.claim(k(1), "b", false) {
			t.Fatal("the same payload on another topic must be a duplicate")
		}
		c.release(k(1), "b") // not b's: no effect
		if !c.claim(k(1), "b", false) {
			t.Fatal("release by another topic dropped the entry")
		}
		c.release(k(1), "a")
		if c.claim(k(1), "b", false) {
			t.Fatal("a released payload is still held")
		}
		time.Sleep(time.Minute)
		if c.claim(k(1), "c", false) {
			t.Fatal("an expired entry still counts")
		}
		if c.claim(k(2), "a", true) || c.verifiedBeat(k(2), "a") || !c.verifiedBeat(k(2), "b") {
			t.Fatal("a beat accepted on topic a is verified for the other topics only")
		}
		if c.verifiedBeat(k(1), "a") || c.verifiedBeat(k(1), "d") {
			t.Fatal("an announcement is never taken as a verified beat")
		}
		for i := range byte(10) {
			c.claim(k(10+i), "a", false)
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

// TestBeatCopyIsNotVerifiedAgain: once a beat's bytes by an author were
// accepted on one topic, their copy on another topic is forwarded as a
// duplicate without decoding or verifying (bytes that do not even decode
// pass, which shows neither ran); on the first topic, and for bytes never
// accepted, the whole path runs.
func TestBeatCopyIsNotVerifiedAgain(t *testing.T) {
	mn := mocknet.New()
	defer func() { _ = mn.Close() }()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	g := &Gossip{h: h, recent: newRecentCache(time.Minute, 16), cfg: DefaultConfig()}
	author := peer.ID("author")
	data := []byte("not a message")
	g.recent.claim(contentKey(author, data), "/agentd/shard/0a1b/1.0.0", true)
	a, res, _, err := g.check("/agentd/shard/ffff/1.0.0", "", "ffff", data, author)
	if err != nil || res != pubsub.ValidationAccept || a == nil || !a.dup {
		t.Fatalf("copy on another topic: %v %v %+v", res, err, a)
	}
	if _, res, _, err := g.check("/agentd/shard/0a1b/1.0.0", "", "0a1b", data, author); err == nil || res == pubsub.ValidationAccept {
		t.Fatalf("the first topic's own copy skipped validation: %v %v", res, err)
	}
	if _, res, _, err := g.check("/agentd/shard/ffff/1.0.0", "", "ffff", []byte("other bytes"), author); err == nil || res == pubsub.ValidationAccept {
		t.Fatalf("bytes never accepted skipped validation: %v %v", res, err)
	}
}
