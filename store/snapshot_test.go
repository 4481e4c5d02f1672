package store

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/agentd/agentd/record"
)

// TestSnapshotRestore: an in-memory store's snapshot, loaded into a new
// store, gives back its registrations, cached records (and their index:
// a capability query finds them) and tombstones.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	a := openTest(t, "", Options{Now: clk.Now})
	local := mkRecord(t, agentSpec{issued: clk.Now()})
	if err := a.PutLocal(ctx, local); err != nil {
		t.Fatal(err)
	}
	cached := mkRecord(t, agentSpec{issued: clk.Now()})
	if err := a.Put(ctx, Entry{Record: cached, Source: SourceDHT}); err != nil {
		t.Fatal(err)
	}
	gone := mkRecord(t, agentSpec{seq: 4, issued: clk.Now()})
	if err := a.PutTombstone(ctx, Tombstone{AgentID: gone.Agent.AgentID, Seq: 4, Reason: record.ReasonShutdown}); err != nil {
		t.Fatal(err)
	}
	deleted := mkRecord(t, agentSpec{issued: clk.Now()})
	if err := a.Put(ctx, Entry{Record: deleted, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, deleted.Agent.AgentID); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := Snapshot(a, &snap); err != nil {
		t.Fatal(err)
	}
	b := openTest(t, "", Options{Now: clk.Now, Restore: &snap})
	locals, err := b.Locals(ctx)
	if err != nil || len(locals) != 1 || locals[0].Agent.AgentID != local.Agent.AgentID {
		t.Fatalf("restored locals: %v, %v", locals, err)
	}
	e, err := b.Get(ctx, cached.Agent.AgentID)
	if err != nil || e.Source != SourceDHT || e.Record.Agent.AgentID != cached.Agent.AgentID {
		t.Fatalf("restored entry: %+v, %v", e, err)
	}
	caps := cached.Agent.AllCapabilities()
	if len(caps) == 0 {
		t.Fatal("test record without capabilities")
	}
	found, err := b.Query(ctx, Filter{Capability: caps[0]})
	if err != nil || len(found) != 1 {
		t.Fatalf("capability query after restore: %d entries, %v", len(found), err)
	}
	if tb, ok, err := b.GetTombstone(ctx, gone.Agent.AgentID); err != nil || !ok || tb.Seq != 4 {
		t.Fatalf("restored tombstone: %+v %v %v", tb, ok, err)
	}
	if e, err := b.Get(ctx, deleted.Agent.AgentID); err == nil {
		t.Fatalf("an entry deleted before the snapshot is back: %+v", e)
	}
	if found, err := b.Query(ctx, Filter{Capability: deleted.Agent.AllCapabilities()[0]}); err != nil || len(found) != 1 {
		t.Fatalf("the deleted entry's capability after restore: %d entries (want the cached one only), %v", len(found), err)
	}
	if err := Snapshot(nil, &snap); err == nil {
		t.Fatal("snapshot of a nil store")
	}
}

// TestSnapshotAllocatesWhatItHolds: a snapshot of a small store allocates
// in proportion to it. Badger's DB.Backup zeroed a 32 MiB buffer per
// stream worker whatever the size, which simnet paid at every departure.
func TestSnapshotAllocatesWhatItHolds(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	a := openTest(t, "", Options{Now: clk.Now})
	for range 20 {
		if err := a.Put(ctx, Entry{Record: mkRecord(t, agentSpec{issued: clk.Now()}), Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := Snapshot(a, &snap); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// Everything the process allocated meanwhile counts, Badger's own
	// goroutines included; 4 MiB is far above the snapshot's share and
	// far below one Backup worker's buffer.
	if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
		t.Fatalf("a snapshot of %d bytes allocated %d bytes", snap.Len(), n)
	}
	if snap.Len() == 0 {
		t.Fatal("empty snapshot")
	}
}
