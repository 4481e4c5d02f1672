package node

import (
	"context"
	"testing"
	"unsafe"

	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
)

// A hosted agent's highest seq lives in its memo (one map entry per hosted
// agent, not two), moves to lastSeq when the agent stops being hosted and
// back when it returns: a record registered again is above every seq the
// node used for it, its heartbeats' included (they are never stored).
func TestSeqsStayAboveEveryOneUsed(t *testing.T) {
	tn := newNet(t, 1, Config{})
	nd := tn.nodes[0]
	ctx := context.Background()
	a := spec("skill-q", "cap.q")
	a.AgentID = uuid.NewString()
	id := a.AgentID
	sa, err := nd.Register(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	used := sa.Agent.Seq
	for range 5 {
		if seq := nd.nextBeatSeq(id); seq <= used {
			t.Fatalf("beat seq %d not above %d", seq, used)
		} else {
			used = seq
		}
	}
	nd.mu.Lock()
	_, inLast := nd.lastSeq[id]
	memoSeq := nd.memo[id].seq
	nd.mu.Unlock()
	if inLast || memoSeq != used {
		t.Fatalf("hosted: lastSeq entry %v, memo seq %d, want none and %d", inLast, memoSeq, used)
	}

	if err := nd.Unregister(ctx, id, record.ReasonShutdown); err != nil {
		t.Fatal(err)
	}
	nd.mu.Lock()
	_, inMemo := nd.memo[id]
	last := nd.lastSeq[id]
	nd.mu.Unlock()
	if inMemo || last < used {
		t.Fatalf("unregistered: memo entry %v, lastSeq %d, want none and ≥ %d", inMemo, last, used)
	}

	b := spec("skill-q", "cap.q")
	b.AgentID = id
	again, err := nd.Register(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Agent.Seq <= last {
		t.Fatalf("registered again with seq %d, not above %d used before", again.Agent.Seq, last)
	}
	nd.mu.Lock()
	_, inLast = nd.lastSeq[id]
	memoSeq = nd.memo[id].seq
	nd.mu.Unlock()
	if inLast || memoSeq != again.Agent.Seq {
		t.Fatalf("hosted again: lastSeq entry %v, memo seq %d, want none and %d", inLast, memoSeq, again.Agent.Seq)
	}
}

// The memo stays small: a registry holds one per hosted agent.
func TestHostedMemoSize(t *testing.T) {
	if n := unsafe.Sizeof(hostedMemo{}); n > 56 {
		t.Fatalf("hostedMemo is %d bytes, want at most 56", n)
	}
}
