package dht

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func peerIDs(n int) []peer.ID {
	out := make([]peer.ID, n)
	for i := range out {
		out[i] = peer.ID(fmt.Sprintf("peer-%d", i))
	}
	return out
}

// The closest peers of a small network stand in for later lookups until
// the routing table changes, a store fails or the TTL runs out; a large
// answer, a large routing table or a failed lookup is never kept.
func TestSmallNetworkAnswerIsKeptOnlyWhileItHolds(t *testing.T) {
	ctx := context.Background()
	var s smallNet
	answer, calls := peerIDs(3), 0
	var lookupErr error
	lookup := func(context.Context, string) ([]peer.ID, error) {
		calls++
		return answer, lookupErr
	}
	ask := func(what string, rt int, wantCalls int) []peer.ID {
		t.Helper()
		got, err := s.closest(ctx, rt, "k", lookup)
		if err != nil && lookupErr == nil {
			t.Fatalf("%s: %v", what, err)
		}
		if calls != wantCalls {
			t.Fatalf("%s: %d lookups run, want %d", what, calls, wantCalls)
		}
		return got
	}
	if got := ask("first", 3, 1); len(got) != 3 {
		t.Fatalf("first answer %v", got)
	}
	got := ask("same routing table", 3, 1)
	if len(got) != 3 || got[0] != answer[0] {
		t.Fatalf("kept answer %v, want %v", got, answer)
	}
	got[0] = "changed by the caller"
	if again := ask("a caller's change is not kept", 3, 1); again[0] != answer[0] {
		t.Fatalf("kept answer changed through a returned slice: %v", again)
	}
	ask("a peer joined the routing table", 4, 2)
	ask("kept again", 4, 2)
	s.forget()
	ask("a store failed", 4, 3)
	s.mu.Lock()
	s.until = time.Now().Add(-time.Millisecond)
	s.mu.Unlock()
	ask("past the TTL", 4, 4)
	ask("kept again after the TTL", 4, 4)

	s.forget()
	answer = peerIDs(kadBucketSize)
	ask("a full answer", 4, 5)
	ask("a full answer is not kept", 4, 6)

	answer = peerIDs(3)
	ask("a large routing table", kadBucketSize, 7)
	ask("a large routing table's answer is not kept", kadBucketSize, 8)

	lookupErr = errors.New("lookup failed")
	ask("a failed lookup", 3, 9)
	ask("a failed lookup's answer is not kept", 3, 10)
	lookupErr = nil
	answer = nil
	ask("no peer", 3, 11)
	ask("an empty answer is not kept", 3, 12)
	if s.lookups.Load() != 12 || s.saved.Load() != 4 {
		t.Fatalf("counted %d lookups and %d saved, want 12 and 4", s.lookups.Load(), s.saved.Load())
	}
}

// In a network of five servers, a record's 22 keys and two values (the
// agent's and the peer's) are stored with a handful of lookups — the first
// ones, run at once — and every key and value still reaches every server.
func TestSmallNetworkProvidesWithoutALookupPerKey(t *testing.T) {
	c := newCluster(t, 5, 0, nil)
	prov := c.nodes[2]
	spec := skillSpec{}
	for s := range 4 {
		spec[fmt.Sprintf("skill-%d", s)] = []string{"cap-a", "cap-b", fmt.Sprintf("cap-%d", s)}
	}
	// 4 skills × 3 caps + 6 capability-only keys + 4 skill-only keys.
	const keys = 4*3 + 6 + 4
	prov.host(t, 1, spec)
	eventually(t, 20*time.Second, "every key and the value stored on every other server", func() bool {
		st := prov.d.Status()
		return st.ProvidedKeys == keys && st.LastProvideMin >= len(c.nodes)-1 && st.PendingRetries == 0 && st.QueuedPuts == 0
	})
	st := prov.d.Status()
	if run, saved := counterValue(prov.m.DHTLookups.WithLabelValues("run")), counterValue(prov.m.DHTLookups.WithLabelValues("saved")); run != float64(st.Lookups) || saved != float64(st.LookupsSaved) {
		t.Fatalf("metric counts %v run and %v saved, status %d and %d", run, saved, st.Lookups, st.LookupsSaved)
	}
	if st.Lookups > provideParallel+2 || st.LookupsSaved < keys-provideParallel {
		t.Fatalf("%d lookups run and %d saved for %d keys and two values: want at most %d run", st.Lookups, st.LookupsSaved, keys, provideParallel+2)
	}
	for i, n := range c.nodes {
		if n == prov {
			continue
		}
		waitFound(t, n, "skill-3", "cap-3", prov.id.AgentID)
		if _, err := n.d.GetRecord(findCtx(t), prov.id.AgentID); err != nil {
			t.Fatalf("node %d: the value put without its own lookup is not found: %v", i, err)
		}
	}
	t.Logf("%d keys and two values: %d lookups, %d saved", keys, st.Lookups, st.LookupsSaved)
}
