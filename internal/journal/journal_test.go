package journal

import (
	"fmt"
	"testing"
	"time"
)

func TestJournalBoundsAndSums(t *testing.T) {
	j := New(3)
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		j.Note("a", Verdict{At: t0.Add(time.Duration(i) * time.Second), Transport: "gossip", Kind: KindBeat, Seq: uint64(10 + i), Accepted: true}, nil)
	}
	j.Note("a", Verdict{At: t0, Transport: "dht", Kind: KindRecord, Seq: 3, Accepted: true}, []string{"c1", "c2"})
	for i := range MaxRefusals + 4 {
		j.Note("a", Verdict{At: t0, Transport: "gossip", Kind: KindRecord, Reason: fmt.Sprintf("r%d", i)}, nil)
	}
	e, ok := j.Get("a")
	if !ok || len(e.Heard) != 2 {
		t.Fatalf("entry %+v", e)
	}
	if h := e.Heard[0]; h.Count != 5 || h.LastSeq != 14 || !h.First.Equal(t0) || !h.Last.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("gossip beats summed wrong: %+v", h)
	}
	if len(e.Refusals) != MaxRefusals || e.Refusals[0].Reason != "r4" || e.Refusals[MaxRefusals-1].Reason != fmt.Sprintf("r%d", MaxRefusals+3) {
		t.Fatalf("refusals: %d, first %q", len(e.Refusals), e.Refusals[0].Reason)
	}
	if got := j.Offering("c2", 10); len(got) != 1 || got[0].AgentID != "a" {
		t.Fatalf("offering: %+v", got)
	}
	// The least recently updated agent is forgotten first.
	j.Note("b", Verdict{Accepted: true}, nil)
	j.Note("c", Verdict{Accepted: true}, nil)
	j.Note("a", Verdict{Accepted: true}, nil)
	j.Note("d", Verdict{Accepted: true}, nil)
	if _, ok := j.Get("b"); ok || j.Len() != 3 {
		t.Fatalf("b kept, len %d", j.Len())
	}
	if _, ok := j.Get("a"); !ok {
		t.Fatal("a, updated recently, was forgotten")
	}
	j.NoteLeft("a", t0, "timeout")
	if e, _ := j.Get("a"); e.Left == nil || e.Left.Reason != "timeout" {
		t.Fatalf("left %+v", e.Left)
	}
	// Copies: changing what Get returned changes nothing held.
	e, _ = j.Get("a")
	e.Heard[0].Count = 99
	if e2, _ := j.Get("a"); e2.Heard[0].Count == 99 {
		t.Fatal("Get returned shared memory")
	}
	var nilJ *Journal
	nilJ.Note("x", Verdict{}, nil)
	if _, ok := nilJ.Get("x"); ok || nilJ.Len() != 0 {
		t.Fatal("nil journal holds something")
	}
}

func BenchmarkNoteBeat(b *testing.B) {
	j := New(0)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%d", i)
	}
	v := Verdict{Transport: "gossip", Kind: KindBeat, Accepted: true, At: time.Unix(1, 0)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j.Note(ids[i%len(ids)], v, nil)
	}
}
