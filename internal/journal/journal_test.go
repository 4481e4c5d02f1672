package journal

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

func TestJournalCoalescesRepeatedRefusals(t *testing.T) {
	j := New(0)
	for i := range 100 {
		j.Note("a", Verdict{Transport: "gossip", Kind: KindBeat, Seq: uint64(i), Reason: "bad_signature", Detail: fmt.Sprint(i)}, nil)
	}
	j.Note("a", Verdict{Transport: "gossip", Kind: KindRecord, Reason: "revoked"}, nil)
	j.Note("a", Verdict{Transport: "gossip", Kind: KindBeat, Reason: "bad_signature"}, nil)
	e, _ := j.Get("a")
	if len(e.Refusals) != 3 || e.Refusals[0].Count != 100 || e.Refusals[0].Seq != 99 || e.Refusals[0].Detail != "99" || e.Refusals[1].Count != 1 || e.Refusals[2].Count != 1 {
		t.Fatalf("refusals %+v", e.Refusals)
	}
	long := strings.Repeat("é", 500)
	j.Note("b", Verdict{Reason: "x", Detail: long}, nil)
	if e, _ := j.Get("b"); len(e.Refusals[0].Detail) > maxDetail+len("…") || !utf8.ValidString(e.Refusals[0].Detail) {
		t.Fatalf("detail of %d bytes, valid UTF-8 %v", len(e.Refusals[0].Detail), utf8.ValidString(e.Refusals[0].Detail))
	}
	caps := make([]string, 100)
	for i := range caps {
		caps[i] = fmt.Sprint("cap-", i)
	}
	j.Note("c", Verdict{Reason: "x"}, caps)
	if e, _ := j.Get("c"); len(e.Capabilities) != MaxCapabilities {
		t.Fatalf("%d capabilities kept", len(e.Capabilities))
	}
}

// The worst a flood of refused records can pin: every agent id fresh, each
// with MaxRefusals different reasons, full details and MaxCapabilities long
// capability ids.
func TestJournalWorstCaseMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	j := New(0)
	for i := range DefaultMaxAgents + 100 {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		caps := make([]string, MaxCapabilities)
		for k := range caps {
			caps[k] = fmt.Sprintf("%064d", i*100+k)
		}
		for r := range MaxRefusals {
			j.Note(id, Verdict{Transport: "gossip", Kind: KindRecord, Seq: uint64(r), PeerID: fmt.Sprintf("12D3KooW%044d", i),
				Reason: fmt.Sprint("reason-", r), Detail: strings.Repeat("d", 400)}, caps)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if j.Len() != DefaultMaxAgents {
		t.Fatalf("%d agents held", j.Len())
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / DefaultMaxAgents
	t.Logf("worst case: %.0f bytes per agent, %.1f MB for %d agents (heap %d → %d)", per, per*DefaultMaxAgents/1e6, DefaultMaxAgents, before.HeapAlloc, after.HeapAlloc)
	if per > 4096 {
		t.Fatalf("%.0f bytes per agent: the bounds no longer hold the journal under 4 KB per agent", per)
	}
	runtime.KeepAlive(j)
}
