package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	badger "github.com/dgraph-io/badger/v4"
)

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src) //nolint:gosec // test files
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dst) //nolint:gosec // test files
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// journalFiles lists the journal files of dir.
func journalFiles(t *testing.T, dir string) []journalFile {
	t.Helper()
	fs, err := (&journal{dir: dir}).files()
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// copyJournal copies the one journal file of src into dst.
func copyJournal(t *testing.T, src, dst string) {
	t.Helper()
	fs := journalFiles(t, src)
	if len(fs) != 1 {
		t.Fatalf("%d journal files in %s, want 1", len(fs), src)
	}
	copyFile(t, filepath.Join(src, fs[0].name), filepath.Join(dst, fs[0].name))
}

func testPin(day int) trust.Pin {
	return trust.Pin{KeyPEM: "key", FirstSeen: time.Date(2026, 1, day, 0, 0, 0, 0, time.UTC)}
}

// storedPin reads a pin as the store holds it.
func storedPin(t *testing.T, s *db, id string) (trust.Pin, bool) {
	t.Helper()
	p, ok, err := s.GetPin(id)
	if err != nil {
		t.Fatal(err)
	}
	return p, ok
}

// closedStoreWithOne makes a store holding one local registration and
// closes it; it returns its directory and the registration.
func closedStoreWithOne(t *testing.T) (string, *record.SignedAgent) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db")
	s := openTest(t, dir, Options{})
	sa := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, sa
}

// What a durable write acknowledged is in the journal even when Badger's
// files lose everything written since the last checkpoint (a power cut:
// its logs are not synced any more): the test keeps the store's files as
// they were at the checkpoint, adds the journal written after, and opens
// that.
func TestJournalReplaysWhatBadgerLost(t *testing.T) {
	ctx := context.Background()
	dir, kept := closedStoreWithOne(t)
	if fs := journalFiles(t, dir); len(fs) != 0 {
		t.Fatalf("Close left journal files: %v", fs)
	}
	atCheckpoint := filepath.Join(t.TempDir(), "db")
	copyDir(t, dir, atCheckpoint)

	s := openTest(t, dir, Options{})
	a := mkRecord(t, agentSpec{issued: time.Now()})
	b := mkRecord(t, agentSpec{issued: time.Now()})
	done := s.DeferPin(a.Agent.AgentID)
	if err := s.PutPin(a.Agent.AgentID, testPin(1)); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []*record.SignedAgent{a, b} {
		if err := s.PutLocal(ctx, sa); err != nil {
			t.Fatal(err)
		}
	}
	done()
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := s.PutLease(ctx, a.Agent.AgentID, until); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStatus(ctx, a.Agent.AgentID, record.StatusDegraded); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLocal(ctx, kept.Agent.AgentID); err != nil {
		t.Fatal(err)
	}
	other := mkRecord(t, agentSpec{}).Agent.AgentID
	if err := s.PutPin(other, testPin(2)); err != nil { // unsynced, journaled
		t.Fatal(err)
	}
	copyJournal(t, dir, atCheckpoint)

	r := openTest(t, atCheckpoint, Options{})
	locals, err := r.Locals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sa := range locals {
		got = append(got, sa.Agent.AgentID)
	}
	want := []string{a.Agent.AgentID, b.Agent.AgentID}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("locals after replay %v, want %v", got, want)
	}
	if v, err := r.get(seqKey(a.Agent.AgentID)); err != nil || !bytes.Equal(v, encodeU64(a.Agent.Seq)) {
		t.Fatalf("seq counter after replay: %x %v, want %d", v, err, a.Agent.Seq)
	}
	if p, ok := storedPin(t, r, a.Agent.AgentID); !ok || !p.FirstSeen.Equal(testPin(1).FirstSeen) {
		t.Fatalf("pin after replay: %+v %v", p, ok)
	}
	if p, ok := storedPin(t, r, other); !ok || !p.FirstSeen.Equal(testPin(2).FirstSeen) {
		t.Fatalf("unsynced pin after replay: %+v %v", p, ok)
	}
	leases, err := r.Leases(ctx)
	if err != nil || !leases[a.Agent.AgentID].Equal(until) || len(leases) != 1 {
		t.Fatalf("leases after replay: %v %v", leases, err)
	}
	sts, err := r.Statuses(ctx)
	if err != nil || sts[a.Agent.AgentID] != record.StatusDegraded || len(sts) != 1 {
		t.Fatalf("statuses after replay: %v %v", sts, err)
	}
	// Replayed, then checkpointed: the old journal is gone, a new one started.
	if fs := journalFiles(t, atCheckpoint); len(fs) != 1 || fs[0].gen != 2 {
		t.Fatalf("journal files after replay: %v", fs)
	}
}

// Replaying a journal over a store that lost nothing (the process died,
// the kernel kept its pages) changes nothing: a pin written after the
// registration that wrote an older one stays, and a seq counter NextSeq
// raised past the journaled one stays.
func TestJournalReplayIsIdempotent(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	clk := newClock()
	s := openTest(t, dir, Options{Now: clk.Now})
	a := mkRecord(t, agentSpec{issued: time.Now(), seq: 7})
	id := a.Agent.AgentID
	done := s.DeferPin(id)
	if err := s.PutPin(id, testPin(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLocal(ctx, a); err != nil {
		t.Fatal(err)
	}
	done()
	if err := s.PutPin(id, testPin(2)); err != nil {
		t.Fatal(err)
	}
	next, err := s.NextSeq(ctx, id)
	if err != nil || next <= a.Agent.Seq {
		t.Fatalf("NextSeq: %d %v", next, err)
	}
	gone := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLocal(ctx, gone.Agent.AgentID); err != nil {
		t.Fatal(err)
	}
	saved := t.TempDir()
	copyJournal(t, dir, saved)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	copyJournal(t, saved, dir)

	r := openTest(t, dir, Options{Now: clk.Now})
	if p, ok := storedPin(t, r, id); !ok || !p.FirstSeen.Equal(testPin(2).FirstSeen) {
		t.Fatalf("pin after replay: %+v %v, want the later one", p, ok)
	}
	if seq, err := r.PeekSeq(ctx, id); err != nil || seq != next+1 {
		t.Fatalf("seq after replay: %d %v, want %d", seq, err, next+1)
	}
	if _, err := r.getLocal(gone.Agent.AgentID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a removed registration came back: %v", err)
	}
	if _, err := r.getLocal(id); err != nil {
		t.Fatal(err)
	}
}

// getLocal reads a local registration's stored value.
func (s *db) getLocal(id string) ([]byte, error) { return s.get(localKey(id)) }

// A write torn by a crash ends the replay where it starts; the entries
// before it are applied, and the store opens whatever the torn bytes are.
func TestJournalTornTail(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s := openTest(t, dir, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "base")
	copyDir(t, dir, base)
	s = openTest(t, dir, Options{})
	a := mkRecord(t, agentSpec{issued: time.Now()})
	b := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(ctx, a); err != nil {
		t.Fatal(err)
	}
	j := s.journal
	firstEnd := journalHeaderSize + j.off
	if err := s.PutLocal(ctx, b); err != nil {
		t.Fatal(err)
	}
	secondEnd := journalHeaderSize + j.off
	name := journalFiles(t, dir)[0].name
	data, err := os.ReadFile(filepath.Join(dir, name)) //nolint:gosec // test file
	if err != nil {
		t.Fatal(err)
	}
	data = data[:secondEnd+64] // the rest is the allocation's zeros
	tear := func(cut int64, garbage bool) []byte {
		torn := slices.Clone(data)
		for i := cut; i < secondEnd; i++ {
			if garbage {
				torn[i] ^= 0x5a
			} else {
				torn[i] = 0
			}
		}
		return torn
	}
	_, first, err := decodeJournalHeader(data)
	if err != nil {
		t.Fatal(err)
	}
	// Every cut, read: the first entry always, the second only whole.
	for cut := firstEnd; cut <= secondEnd; cut++ {
		for _, garbage := range []bool{false, true} {
			n := 0
			end, stop := scanJournal(tear(cut, garbage)[journalHeaderSize:], first, func(uint64, []byte) { n++ })
			whole := cut == secondEnd
			if want := map[bool]int{true: 2, false: 1}[whole]; n != want {
				t.Fatalf("cut at %d (garbage %v): %d entries, want %d", cut, garbage, n, want)
			}
			if !whole && journalHeaderSize+int64(end) != firstEnd {
				t.Fatalf("cut at %d (garbage %v): entries end at %d, want %d (%v)", cut, garbage, end, firstEnd, stop)
			}
		}
	}
	// A few, opened as a store.
	for _, c := range []struct {
		cut     int64
		garbage bool
	}{{firstEnd, false}, {(firstEnd + secondEnd) / 2, false}, {firstEnd + 5, true}, {secondEnd - 1, true}, {secondEnd, false}} {
		d := filepath.Join(t.TempDir(), "db")
		copyDir(t, base, d)
		if err := os.WriteFile(filepath.Join(d, name), tear(c.cut, c.garbage), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := open(Options{Dir: d, Logger: testLogger(t)}, false)
		if err != nil {
			t.Fatalf("cut at %d: %v", c.cut, err)
		}
		_, errA := r.getLocal(a.Agent.AgentID)
		_, errB := r.getLocal(b.Agent.AgentID)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if errA != nil {
			t.Fatalf("cut at %d: the entry before the tear is lost: %v", c.cut, errA)
		}
		if whole := c.cut == secondEnd; whole != (errB == nil) {
			t.Fatalf("cut at %d of %d: second registration %v", c.cut, secondEnd, errB)
		}
	}
}

// A journal file fills, the store checkpoints and goes on in a new one;
// only the newest file is kept, and every registration is there after a
// reopen.
func TestJournalCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s := openTest(t, dir, Options{journalSegment: 8 << 10})
	var ids []string
	for range 40 {
		sa := mkRecord(t, agentSpec{issued: time.Now()})
		if err := s.PutLocal(ctx, sa); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sa.Agent.AgentID)
		if fs := journalFiles(t, dir); len(fs) != 1 {
			t.Fatalf("%d journal files", len(fs))
		}
	}
	if fs := journalFiles(t, dir); fs[0].gen < 4 {
		t.Fatalf("journal generation %d after 40 registrations in 8 KiB files", fs[0].gen)
	}
	// A checkpoint's Badger files are on disk: the store as it is now plus
	// the newest journal file opens with everything.
	snapshot := filepath.Join(t.TempDir(), "db")
	copyDir(t, dir, snapshot)
	r := openTest(t, snapshot, Options{})
	for _, id := range ids {
		if _, err := r.getLocal(id); err != nil {
			t.Fatal(err)
		}
	}
}

// After a failed journal write the next durable write checkpoints first
// and succeeds; what the failed one wrote to Badger is kept by that
// checkpoint.
func TestJournalRecoversFromAFailedWrite(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	s := openTest(t, dir, Options{})
	gen := s.journal.gen
	_ = s.journal.f.Close() // every write and sync of it now fails
	a := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(ctx, a); err == nil {
		t.Fatal("PutLocal succeeded with a closed journal")
	}
	if !s.journal.broken {
		t.Fatal("a failed write did not mark the journal broken")
	}
	b := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(ctx, b); err != nil {
		t.Fatalf("the write after a failure: %v", err)
	}
	if s.journal.gen != gen+1 || s.journal.broken {
		t.Fatalf("journal after recovery: generation %d (was %d), broken %v", s.journal.gen, gen, s.journal.broken)
	}
	for _, id := range []string{a.Agent.AgentID, b.Agent.AgentID} {
		if _, err := s.getLocal(id); err != nil {
			t.Fatal(err)
		}
	}
}

// An entry that is framed and checksummed but does not decode (a key
// outside the journal's spaces) is skipped; the entries around it apply.
func TestJournalSkipsAnUndecodableEntry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s := openTest(t, dir, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	id1, id2 := groupID(1), groupID(2)
	var body []byte
	body = appendJournalEntry(body, 5, appendOp(nil, opSet, leaseKey(id1), encodeU64(1), 0))
	body = appendJournalEntry(body, 6, appendOp(nil, opSet, []byte("c/"+id1), []byte("x"), 0))
	body = appendJournalEntry(body, 7, appendOp(nil, opSet, leaseKey(id2), encodeU64(2), 0))
	file := append(encodeJournalHeader(3, 5), body...)
	if err := os.WriteFile(filepath.Join(dir, journalName(3)), file, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir, Options{})
	for _, id := range []string{id1, id2} {
		if _, err := r.get(leaseKey(id)); err != nil {
			t.Fatalf("lease of %s: %v", id, err)
		}
	}
	if _, err := r.get([]byte("c/" + id1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a key outside the journal's spaces was written: %v", err)
	}
	if r.journal.next != 8 || r.journal.gen != 4 {
		t.Fatalf("journal after replay: next %d, generation %d", r.journal.next, r.journal.gen)
	}
}

func TestDecodeOps(t *testing.T) {
	id := groupID(9)
	var p []byte
	p = appendOp(p, opSet, localKey(id), []byte("record"), 0)
	p = appendOp(p, opDel, statusKey(id), nil, 0)
	p = appendOp(p, opRaise, seqKey(id), nil, 42)
	ops, err := decodeOps(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []journalOp{{opSet, localKey(id), []byte("record"), 0}, {opDel, statusKey(id), nil, 0}, {opRaise, seqKey(id), nil, 42}}
	if len(ops) != len(want) {
		t.Fatalf("%d ops", len(ops))
	}
	for i := range ops {
		if ops[i].op != want[i].op || !bytes.Equal(ops[i].key, want[i].key) || !bytes.Equal(ops[i].val, want[i].val) || ops[i].n != want[i].n {
			t.Fatalf("op %d: %+v, want %+v", i, ops[i], want[i])
		}
	}
	for name, bad := range map[string][]byte{
		"empty":             nil,
		"unknown op":        appendOp(nil, 'X', localKey(id), nil, 0),
		"set of a counter":  appendOp(nil, opSet, seqKey(id), encodeU64(1), 0),
		"raise of a record": appendOp(nil, opRaise, localKey(id), nil, 1),
		"cache key":         appendOp(nil, opDel, []byte("c/"+id), nil, 0),
		"bad agent id":      appendOp(nil, opDel, localKey("x"), nil, 0),
		"truncated value":   appendOp(nil, opSet, localKey(id), []byte("record"), 0)[:len(localKey(id))+4],
		"truncated counter": appendOp(nil, opRaise, seqKey(id), nil, 1)[:len(seqKey(id))+5],
	} {
		if _, err := decodeOps(bad); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzJournal: whatever a journal file holds, reading it neither panics
// nor reads past it, and what it returns re-encodes to the bytes read.
func FuzzJournal(f *testing.F) {
	id := groupID(3)
	valid := encodeJournalHeader(1, 10)
	valid = appendJournalEntry(valid, 10, appendOp(nil, opSet, localKey(id), []byte("v"), 0))
	valid = appendJournalEntry(valid, 12, appendOp(appendOp(nil, opDel, statusKey(id), nil, 0), opRaise, seqKey(id), nil, 9))
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(slices.Clone(valid), make([]byte, 40)...))
	f.Add(encodeJournalHeader(2, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, first, err := decodeJournalHeader(data)
		if err != nil {
			return
		}
		body := data[journalHeaderSize:]
		var again []byte
		last := uint64(0)
		end, _ := scanJournal(body, first, func(seq uint64, payload []byte) {
			if seq < first || (len(again) > 0 && seq <= last) {
				t.Fatalf("seq %d after %d (first %d)", seq, last, first)
			}
			last = seq
			again = appendJournalEntry(again, seq, payload)
			ops, err := decodeOps(payload)
			if err != nil {
				return
			}
			var enc []byte
			for _, o := range ops {
				enc = appendOp(enc, o.op, o.key, o.val, o.n)
			}
			if !bytes.Equal(enc, payload) {
				t.Fatalf("ops re-encode to %x, read from %x", enc, payload)
			}
		})
		if end < 0 || end > len(body) || !bytes.Equal(again, body[:end]) {
			t.Fatalf("entries end at %d of %d and re-encode to %d bytes", end, len(body), len(again))
		}
	})
}

// The journal's entries are applied as Badger writes; a raise never lowers.
func TestRaise(t *testing.T) {
	s := openTest(t, "", Options{})
	k := seqKey(groupID(1))
	for _, c := range []struct{ n, want uint64 }{{5, 5}, {3, 5}, {9, 9}} {
		if err := s.bdb.Update(func(txn *badger.Txn) error { return raise(txn, k, c.n) }); err != nil {
			t.Fatal(err)
		}
		v, err := s.get(k)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := decodeU64(v); got != c.want {
			t.Fatalf("raise to %d: %d, want %d", c.n, got, c.want)
		}
	}
}

// A store whose journal cannot be started (here a directory sits where
// the next journal file goes; a full disk would do the same) still
// opens and serves what it holds; durable writes fail until a checkpoint
// succeeds, then go on.
func TestOpenWithoutAJournalFile(t *testing.T) {
	ctx := context.Background()
	dir, _ := closedStoreWithOne(t)
	block := filepath.Join(dir, journalName(1))
	if err := os.Mkdir(block, 0o700); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir, Options{})
	if locals, err := r.Locals(ctx); err != nil || len(locals) != 1 {
		t.Fatalf("reads without a journal file: %d locals, %v", len(locals), err)
	}
	b := mkRecord(t, agentSpec{issued: time.Now()})
	if err := r.PutLocal(ctx, b); err == nil {
		t.Fatal("a durable write succeeded without a journal file")
	}
	if err := r.PutPin(b.Agent.AgentID, testPin(1)); err == nil {
		t.Fatal("a journaled write succeeded without a journal file")
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if err := r.PutLocal(ctx, b); err != nil {
		t.Fatalf("a durable write once the journal can start: %v", err)
	}
	if r.journal.gen != 1 || r.journal.broken {
		t.Fatalf("journal after recovery: generation %d, broken %v", r.journal.gen, r.journal.broken)
	}
}

// A newer journal file whose header did not reach the disk is skipped for
// the one before it, and the new file starts above both, so neither is
// read again.
func TestJournalDamagedNewerFile(t *testing.T) {
	dir, _ := closedStoreWithOne(t)
	id := groupID(4)
	file := append(encodeJournalHeader(3, 1), appendJournalEntry(nil, 1, appendOp(nil, opSet, leaseKey(id), encodeU64(7), 0))...)
	if err := os.WriteFile(filepath.Join(dir, journalName(3)), file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, journalName(9)), []byte("not a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir, Options{})
	if _, err := r.get(leaseKey(id)); err != nil {
		t.Fatalf("the older file's entry: %v", err)
	}
	if fs := journalFiles(t, dir); len(fs) != 1 || fs[0].gen != 10 {
		t.Fatalf("journal files after open: %v", fs)
	}
}
