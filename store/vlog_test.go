package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// vlogBytes is the size of the value log files in dir.
func vlogBytes(t *testing.T, dir string) (n int64, files int) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ".vlog") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
		files++
	}
	return n, files
}

// TestValueLogGC: a hosted record replaced many times leaves garbage in the
// value log (records live there on disk); gcValueLog gives the space back,
// and the record's last version survives it and a reopen.
func TestValueLogGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	keep := mkRecord(t, agentSpec{})
	if err := s.PutLocal(ctx, keep); err != nil {
		t.Fatal(err)
	}
	key := localKey(keep.Agent.AgentID)
	val, err := s.get(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(val) < valueThreshold {
		t.Fatalf("a stored record of %d bytes stays in the LSM tree (value threshold %d)", len(val), valueThreshold)
	}
	// 40 MiB of earlier versions of the same key, each in its own
	// transaction (one transaction keeps only the last write of a key), in
	// four level-0 tables (a reopen flushes the memtable), so that a
	// compaction merges them; then the record itself again.
	junk := make([]byte, 64<<10)
	for round := range 4 {
		for i := range 160 {
			junk[0], junk[1] = byte(round), byte(i)
			if err := s.bdb.Update(func(txn *badger.Txn) error { return txn.Set(key, junk) }); err != nil {
				t.Fatal(err)
			}
		}
		if round == 3 {
			if err := s.bdb.Update(func(txn *badger.Txn) error { return txn.Set(key, val) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, dir, Options{})
	}
	// Compactions tell Badger which value log bytes are garbage.
	if err := s.bdb.Flatten(1); err != nil {
		t.Fatal(err)
	}
	before, files := vlogBytes(t, dir)
	if files < 2 {
		t.Fatalf("%d value log files after 40 MiB of values: records are not in the value log", files)
	}
	if n := s.gcValueLog(ctx); n == 0 {
		t.Fatal("gcValueLog rewrote nothing")
	}
	after, _ := vlogBytes(t, dir)
	if after >= before {
		t.Fatalf("value log %d bytes after garbage collection, %d before", after, before)
	}
	t.Logf("value log: %d → %d bytes", before, after)
	check := func(s *db) {
		t.Helper()
		got, err := s.Locals(ctx)
		if err != nil || len(got) != 1 || got[0].Agent.AgentID != keep.Agent.AgentID {
			t.Fatalf("Locals after garbage collection: %d %v", len(got), err)
		}
		if err := got[0].VerifySignatures(); err != nil {
			t.Fatalf("record after garbage collection: %v", err)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir, Options{}))
}

// TestValueLogGCInMemory: an in-memory store has no value log to collect.
func TestValueLogGCInMemory(t *testing.T) {
	s := openTest(t, "", Options{})
	if n := s.gcValueLog(context.Background()); n != 0 {
		t.Fatalf("gcValueLog = %d in memory", n)
	}
}
