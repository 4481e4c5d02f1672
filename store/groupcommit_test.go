package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// TestDurableGroupCommit: concurrent durable writes are committed in
// groups; each gets its own answer (one that fails fails alone), and every
// one that succeeded is there after a reopen.
func TestDurableGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	boom := errors.New("boom")
	const n = 64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.durable(func(w *jtxn) error {
				if i%8 == 0 {
					return boom
				}
				return w.Set(leaseKey(groupID(i)), []byte{byte(i)})
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if want := i%8 == 0; errors.Is(err, boom) != want || (!want && err != nil) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{})
	for i := range n {
		v, err := s.get(leaseKey(groupID(i)))
		if i%8 == 0 {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("failed write %d is there: %v %v", i, v, err)
			}
			continue
		}
		if err != nil || len(v) != 1 || v[0] != byte(i) {
			t.Fatalf("write %d after reopen: %v %v", i, v, err)
		}
	}
}

// groupID is the i-th agent id of TestDurableGroupCommit.
func groupID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// TestPutLocalKeepsTheSeq: the seq of a stored registration survives a
// reopen even though NextSeq does not sync, and NextSeq continues above
// the seq of a record its client signed itself.
func TestPutLocalKeepsTheSeq(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	s := openTest(t, dir, Options{Now: clk.Now})
	a := mkRecord(t, agentSpec{issued: time.Now()})
	far := resign(t, a, uint64(clk.Now().UnixMilli())+5000, nil)
	if err := s.PutLocal(ctx, far); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{Now: clk.Now})
	seq, err := s.NextSeq(ctx, a.Agent.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if seq != far.Agent.Seq+1 {
		t.Fatalf("NextSeq after a stored seq %d: %d", far.Agent.Seq, seq)
	}
	// A lower seq does not lower the counter.
	low := resign(t, a, 3, func(ag *record.Agent) {})
	if err := s.PutLocal(ctx, low); err != nil {
		t.Fatal(err)
	}
	if seq, err = s.NextSeq(ctx, a.Agent.AgentID); err != nil || seq != far.Agent.Seq+2 {
		t.Fatalf("NextSeq after storing a lower seq: %d %v", seq, err)
	}
}

// TestPeekSeq: PeekSeq says what NextSeq would and writes nothing.
func TestPeekSeq(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, t.TempDir(), Options{Now: clk.Now})
	a := mkRecord(t, agentSpec{issued: time.Now()})
	far := resign(t, a, uint64(clk.Now().UnixMilli())+5000, nil)
	if err := s.PutLocal(ctx, far); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if seq, err := s.PeekSeq(ctx, a.Agent.AgentID); err != nil || seq != far.Agent.Seq+1 {
			t.Fatalf("PeekSeq = %d, %v; want %d", seq, err, far.Agent.Seq+1)
		}
	}
	if seq, err := s.NextSeq(ctx, a.Agent.AgentID); err != nil || seq != far.Agent.Seq+1 {
		t.Fatalf("NextSeq after PeekSeq = %d, %v", seq, err)
	}
	if _, err := s.PeekSeq(ctx, "not-a-uuid"); record.FieldOf(err) != "agent_id" {
		t.Fatalf("bad agent id: %v", err)
	}
}
