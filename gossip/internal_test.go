package gossip

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestRecentCache(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newRecentCache(time.Minute, 3)
		k := func(b byte) [32]byte { return [32]byte{b} }
		ann, beat := &Message{Kind: KindAnnounce}, &Message{Kind: KindHeartbeat}
		if c.claim(k(1), "a", ann) {
			t.Fatal("first claim is a duplicate")
		}
		if c.claim(k(1), "a", ann) {
			t.Fatal("same topic again is not a cross-topic duplicate")
		}
		if !c.claim(k(1), "b", ann) {
			t.Fatal("the same payload on another topic must be a duplicate")
		}
		c.release(k(1), "b") // not b's: no effect
		if !c.claim(k(1), "b", ann) {
			t.Fatal("release by another topic dropped the entry")
		}
		c.release(k(1), "a")
		if c.claim(k(1), "b", ann) {
			t.Fatal("a released payload is still held")
		}
		time.Sleep(time.Minute)
		if c.claim(k(1), "c", ann) {
			t.Fatal("an expired entry still counts")
		}
		if c.claim(k(2), "a", beat) || c.verifiedBeat(k(2), "a") || !c.verifiedBeat(k(2), "b") {
			t.Fatal("a beat accepted on topic a is verified for the other topics only")
		}
		if c.verifiedBeat(k(1), "a") || c.verifiedBeat(k(1), "d") {
			t.Fatal("an announcement is never taken as a verified beat")
		}
		if c.verifiedAnnounce(k(1), "c") != nil || c.verifiedAnnounce(k(1), "d") != ann || c.verifiedAnnounce(k(2), "b") != nil {
			t.Fatal("an announcement accepted on topic c is verified for the other topics only, and a beat is no announcement")
		}
		for i := range byte(10) {
			c.claim(k(10+i), "a", ann)
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

func (s *countingSink) UnknownAgent(id string, _ peer.ID, interval time.Duration) {
	s.calls <- fmt.Sprintf("%s@%v", id, interval)
}

func TestUnknownQueue(t *testing.T) {
	bubble(t, func(t *testing.T) {
		u := newUnknownQueue(4 * time.Second)
		for range 5 {
			u.request("agent-1", "p", 100*time.Second)
		}
		u.request("agent-2", "p", 0)
		if len(u.ch) != 2 {
			t.Fatalf("queued %d requests, want 2 (one per agent)", len(u.ch))
		}
		time.Sleep(4 * time.Second)
		u.request("agent-1", "p", 0)
		if len(u.ch) != 3 {
			t.Fatalf("after the backoff: %d queued, want 3", len(u.ch))
		}
		// A full queue drops the request without remembering it, so the
		// next beat retries.
		for i := range unknownQueueLen {
			u.request(string(rune('A'+i%26))+time.Duration(i).String(), "p", 0)
		}
		if len(u.ch) != unknownQueueLen {
			t.Fatalf("queue length %d", len(u.ch))
		}
		u.request("agent-late", "p", 0)
		if _, ok := u.last["agent-late"]; ok {
			t.Fatal("a dropped request is remembered")
		}
		sink := &countingSink{fakeSink: newFakeSink(), calls: make(chan string, unknownQueueLen+8)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); u.work(ctx, sink) }()
		if got := <-sink.calls; got != "agent-1@1m40s" {
			t.Fatalf("first call for %q, want agent-1 with the interval its beat claimed", got)
		}
		cancel()
		<-done
	})
}

// checkOnly is a Gossip with what check needs and nothing started.
func checkOnly(t *testing.T) *Gossip {
	t.Helper()
	h, _ := loneHost(t)
	return &Gossip{h: h, recent: newRecentCache(time.Minute, 16), cfg: DefaultConfig()}
}

// TestBeatCopyIsNotVerifiedAgain: once a beat's bytes by an author were
// accepted on one topic, their copy on another topic is forwarded as a
// duplicate without decoding or verifying (bytes that do not even decode
// pass, which shows neither ran); on the first topic, and for bytes never
// accepted, the whole path runs.
func TestBeatCopyIsNotVerifiedAgain(t *testing.T) {
	g := checkOnly(t)
	author := peer.ID("author")
	data := []byte("not a message")
	g.recent.claim(contentKey(author, data), "/agentd/shard/0a1b/1.0.0", &Message{Kind: KindHeartbeat})
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

// An announcement accepted on one shard topic: its copy on another shard
// topic is not decoded or verified again (bytes that do not decode pass),
// but it is still checked against that topic's shard — an agent announced
// on a shard it has no capability in is refused there.
func TestAnnounceCopyIsNotVerifiedAgain(t *testing.T) {
	g := checkOnly(t)
	author := peer.ID("author")
	data := []byte("not a message either")
	a := &record.Agent{Skills: []record.Skill{{SkillID: "s", Capabilities: []record.Capability{{ID: "cap.one"}, {ID: "cap.two"}}}}}
	one, two := record.Shard("cap.one"), record.Shard("cap.two")
	m := &Message{Kind: KindAnnounce, Agent: &record.SignedAgent{Agent: *a}}
	g.recent.claim(contentKey(author, data), "/agentd/shard/"+one+"/1.0.0", m)
	acc, res, _, err := g.check("/agentd/shard/"+two+"/1.0.0", "", two, data, author)
	if err != nil || res != pubsub.ValidationAccept || acc == nil || !acc.dup || acc.msg != m {
		t.Fatalf("copy on the agent's other shard: %v %v %+v", res, err, acc)
	}
	other := "ffff"
	if other == one || other == two {
		other = "fffe"
	}
	if _, res, reason, err := g.check("/agentd/shard/"+other+"/1.0.0", "", other, data, author); err == nil || res != pubsub.ValidationReject || reason != ReasonShardMismatch {
		t.Fatalf("copy on a shard the agent is not in: %v %v %v", res, reason, err)
	}
	if _, res, _, err := g.check("/agentd/shard/"+one+"/1.0.0", "", one, data, author); err == nil || res == pubsub.ValidationAccept {
		t.Fatalf("the first topic's own copy skipped validation: %v %v", res, err)
	}
}
