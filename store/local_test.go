package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestLocals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	a := mkRecord(t, agentSpec{issued: time.Now()})
	b := mkRecord(t, agentSpec{issued: time.Now()})
	for _, sa := range []*record.SignedAgent{a, b} {
		if err := s.PutLocal(ctx, sa); err != nil {
			t.Fatal(err)
		}
	}
	a2 := resign(t, a, 2, nil)
	if err := s.PutLocal(ctx, a2); err != nil {
		t.Fatal(err)
	}
	got, err := s.Locals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(sortedIDs(got...), sortedIDs(a, b)) {
		t.Fatalf("Locals: %v", sortedIDs(got...))
	}
	for _, sa := range got {
		if sa.Agent.AgentID == a.Agent.AgentID && sa.Agent.Seq != 2 {
			t.Fatal("PutLocal did not replace")
		}
		if err := sa.VerifySignatures(); err != nil {
			t.Fatalf("read-back record does not verify: %v", err)
		}
		if !isCompact(sa) {
			t.Fatalf("Locals' record of %s holds its canonical bytes", sa.Agent.AgentID)
		}
	}
	if err := s.DeleteLocal(ctx, b.Agent.AgentID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLocal(ctx, b.Agent.AgentID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second DeleteLocal: %v", err)
	}
	if err := s.PutLocal(ctx, nil); record.FieldOf(err) != "record" {
		t.Fatalf("nil record: %v", err)
	}
	if err := s.DeleteLocal(ctx, "x"); record.FieldOf(err) != "agent_id" {
		t.Fatalf("bad id: %v", err)
	}
	// Locals are not cache entries.
	if s.Len() != 0 {
		t.Fatal("a local registration shows in the cache")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, Options{})
	got, err = s2.Locals(ctx)
	if err != nil || len(got) != 1 || got[0].Agent.AgentID != a.Agent.AgentID || got[0].Agent.Seq != 2 {
		t.Fatalf("after reopen: %v %v", sortedIDs(got...), err)
	}
}

func TestNextSeq(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	s := openTest(t, dir, Options{Now: clk.Now})
	id := mkRecord(t, agentSpec{}).Agent.AgentID
	first, err := s.NextSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if first != uint64(clk.Now().UnixMilli()) {
		t.Fatalf("first seq %d, want now in ms %d", first, clk.Now().UnixMilli())
	}
	// Same millisecond: still strictly increasing.
	second, _ := s.NextSeq(ctx, id)
	if second != first+1 {
		t.Fatalf("second seq %d", second)
	}
	// Another agent has its own counter.
	other, _ := s.NextSeq(ctx, mkRecord(t, agentSpec{}).Agent.AgentID)
	if other != first {
		t.Fatalf("other agent seq %d", other)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The clock jumps back an hour; the persisted counter wins.
	clk.Add(-time.Hour)
	s2 := openTest(t, dir, Options{Now: clk.Now})
	third, err := s2.NextSeq(ctx, id)
	if err != nil || third != second+1 {
		t.Fatalf("after reopen with the clock back: %d %v", third, err)
	}
	// The clock jumps forward: now in ms wins.
	clk.Add(2 * time.Hour)
	fourth, _ := s2.NextSeq(ctx, id)
	if fourth != uint64(clk.Now().UnixMilli()) {
		t.Fatalf("after clock forward: %d", fourth)
	}
	if _, err := s2.NextSeq(ctx, "not-a-uuid"); record.FieldOf(err) != "agent_id" {
		t.Fatalf("bad id: %v", err)
	}
}

// A pin held by DeferPin is read back at once, written by the agent's
// PutLocal in its transaction, and, when no registration follows, written
// by done; pins of other agents are written as usual meanwhile.
func TestDeferredPins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	pem := sharedIdentity(t).PublicKeyPEM()
	pin := func(day int) trust.Pin {
		return trust.Pin{KeyPEM: pem, FirstSeen: time.Date(2026, 1, day, 0, 0, 0, 0, time.UTC)}
	}
	onDisk := func(id string) (trust.Pin, bool) {
		t.Helper()
		v, err := s.get(pinKey(id))
		if errors.Is(err, ErrNotFound) {
			return trust.Pin{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := decodePin(v)
		if err != nil {
			t.Fatal(err)
		}
		return p, true
	}

	// Held, then stored with the registration.
	sa := mkRecord(t, agentSpec{})
	id := sa.Agent.AgentID
	done := s.DeferPin(id)
	if err := s.PutPin(id, pin(1)); err != nil {
		t.Fatal(err)
	}
	if _, ok := onDisk(id); ok {
		t.Fatal("a held pin was written before the registration")
	}
	if p, ok, err := s.GetPin(id); err != nil || !ok || !p.FirstSeen.Equal(pin(1).FirstSeen) {
		t.Fatalf("GetPin of a held pin: %+v %v %v", p, ok, err)
	}
	other := mkRecord(t, agentSpec{}).Agent.AgentID
	if err := s.PutPin(other, pin(2)); err != nil {
		t.Fatal(err)
	}
	if _, ok := onDisk(other); !ok {
		t.Fatal("another agent's pin was held")
	}
	if err := s.PutLocal(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if p, ok := onDisk(id); !ok || !p.FirstSeen.Equal(pin(1).FirstSeen) {
		t.Fatalf("pin after the registration: %+v %v", p, ok)
	}
	done()
	done() // idempotent

	// Held, and no registration follows: done writes it.
	lone := mkRecord(t, agentSpec{}).Agent.AgentID
	done = s.DeferPin(lone)
	inner := s.DeferPin(lone) // nested: the last done writes
	if err := s.PutPin(lone, pin(3)); err != nil {
		t.Fatal(err)
	}
	inner()
	if _, ok := onDisk(lone); ok {
		t.Fatal("written while still deferred")
	}
	done()
	if p, ok := onDisk(lone); !ok || !p.FirstSeen.Equal(pin(3).FirstSeen) {
		t.Fatalf("pin after done: %+v %v", p, ok)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, Options{})
	for _, x := range []string{id, other, lone} {
		if _, ok, err := s2.GetPin(x); !ok || err != nil {
			t.Fatalf("pin of %s after reopen: %v %v", x, ok, err)
		}
	}

	// A registration that ends after the store closed: its held pin is
	// dropped, and nothing panics.
	late := mkRecord(t, agentSpec{}).Agent.AgentID
	done = s2.DeferPin(late)
	if err := s2.PutPin(late, pin(4)); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	done()
}

func TestPins(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	id := mkRecord(t, agentSpec{}).Agent.AgentID
	if _, ok, err := s.GetPin(id); ok || err != nil {
		t.Fatalf("GetPin of unknown: %v %v", ok, err)
	}
	pin := trust.Pin{KeyPEM: sharedIdentity(t).PublicKeyPEM(), FirstSeen: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := s.PutPin(id, pin); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, Options{})
	got, ok, err := s2.GetPin(id)
	if err != nil || !ok || got.KeyPEM != pin.KeyPEM || !got.FirstSeen.Equal(pin.FirstSeen) {
		t.Fatalf("pin after reopen: %+v %v %v", got, ok, err)
	}
	// The store is a PinStore the verifier can use.
	v, err := trust.NewVerifier(trust.Config{}, s2)
	if err != nil {
		t.Fatal(err)
	}
	sa := mkRecord(t, agentSpec{issued: time.Now()})
	if err := v.VerifyAgent(sa, trust.VerifyOptions{}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if p, ok, _ := s2.GetPin(sa.Agent.AgentID); !ok || p.KeyPEM == "" {
		t.Fatal("verifier did not pin through the store")
	}
}

func TestPeers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	s := openTest(t, dir, Options{Now: clk.Now, MaxPeers: 3})
	var pids []peer.ID
	for range 4 {
		id, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, id.PeerID)
	}
	addr := func(s string) ma.Multiaddr {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a1, a2 := addr("/ip4/10.0.0.1/tcp/4001"), addr("/ip6/::1/udp/4001/quic-v1")
	for i, p := range pids[:3] {
		if err := s.PutPeer(ctx, PeerRecord{ID: p, Addrs: []ma.Multiaddr{a1, a2, a1}, LastSeen: clk.Now().Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != pids[2] || got[2].ID != pids[0] {
		t.Fatalf("order: %v", got)
	}
	if len(got[0].Addrs) != 2 || !got[0].Addrs[0].Equal(a1) || !got[0].Addrs[1].Equal(a2) {
		t.Fatalf("addrs: %v", got[0].Addrs)
	}
	// Refresh pids[0] without addresses: it keeps them and becomes newest;
	// an older LastSeen does not move it back.
	if err := s.PutPeer(ctx, PeerRecord{ID: pids[0], LastSeen: clk.Now().Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPeer(ctx, PeerRecord{ID: pids[0], LastSeen: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	// A fourth peer evicts the least recently seen: pids[1].
	if err := s.PutPeer(ctx, PeerRecord{ID: pids[3], Addrs: []ma.Multiaddr{a2}, LastSeen: clk.Now().Add(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Peers(ctx)
	want := []peer.ID{pids[0], pids[3], pids[2]}
	if len(got) != 3 {
		t.Fatalf("after eviction: %v", got)
	}
	for i := range want {
		if got[i].ID != want[i] {
			t.Fatalf("after eviction: got %v at %d, want %v", got[i].ID, i, want[i])
		}
	}
	if len(got[0].Addrs) != 2 || !got[0].LastSeen.Equal(clk.Now().Add(10*time.Minute)) {
		t.Fatalf("refreshed entry: %+v", got[0])
	}
	if err := s.PutPeer(ctx, PeerRecord{}); record.FieldOf(err) != "id" {
		t.Fatalf("empty id: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, Options{Now: clk.Now, MaxPeers: 2})
	got, _ = s2.Peers(ctx)
	if len(got) != 2 || got[0].ID != pids[0] || got[1].ID != pids[3] {
		t.Fatalf("after reopen with MaxPeers 2: %v", got)
	}
}

func TestCachePersistsAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	o := Options{Now: clk.Now, CacheTTL: time.Hour}
	s := openTest(t, dir, o)
	a := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"keep"}})
	b := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"keep"}, ttl: 10 * time.Minute})
	for _, sa := range []*record.SignedAgent{a, b} {
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceDHT}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutTombstone(ctx, Tombstone{AgentID: b.Agent.AgentID, Seq: 1, Reason: record.ReasonUpgrade}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Get(ctx, a.Agent.AgentID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, o)
	after, err := s2.Get(ctx, a.Agent.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Source != before.Source || !after.ReceivedAt.Equal(before.ReceivedAt) || !after.ExpiresAt.Equal(before.ExpiresAt) ||
		string(after.Record.Canonical()) != string(a.Canonical()) || string(after.Record.PeerSignature) != string(a.PeerSignature) {
		t.Fatalf("entry changed across reopen:\n%+v\n%+v", before, after)
	}
	if got, _ := s2.Query(ctx, Filter{Tags: []string{"keep"}}); len(got) != 1 {
		t.Fatalf("index after reopen: %v", ids(got))
	}
	if _, ok, _ := s2.GetTombstone(ctx, b.Agent.AgentID); !ok {
		t.Fatal("tombstone lost")
	}
	if err := s2.Put(ctx, Entry{Record: b, Source: SourceDHT}); !errors.Is(err, ErrTombstoned) {
		t.Fatalf("tombstone not applied after reopen: %v", err)
	}
}

// TestOpenSkipsCorruptValues writes garbage straight into Badger and
// checks that Open and the readers skip it without failing.
func TestOpenSkipsCorruptValues(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	o := Options{Now: clk.Now}
	s := openTest(t, dir, o)
	good := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"g"}})
	if err := s.Put(ctx, Entry{Record: good, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLocal(ctx, good); err != nil {
		t.Fatal(err)
	}
	other := mkRecord(t, agentSpec{issued: clk.Now()})
	valid := encodeEntry(entryHeader{kind: entryKindCache, received: clk.Now(), expires: clk.Now().Add(time.Hour), source: SourceDHT}, other.MarshalAnnounce())
	bad := map[string][]byte{
		spaceCache + "11111111-1111-4111-8111-111111111111": []byte("garbage"),
		spaceCache + "22222222-2222-4222-8222-222222222222": valid, // record of another agent
		spaceCache + "short": valid,
		spaceLocal + "33333333-3333-4333-8333-333333333333": append([]byte{entryFormat, entryKindLocal}, make([]byte, 40)...),
		spacePeer + "12D3KooWnotapeer":                      []byte(`{"id":"x"}`),
		spaceTombstone + other.Agent.AgentID:                []byte(`{"agent_id":"nope"}`),
		spacePin + other.Agent.AgentID:                      []byte(`not json`),
		spaceIndex + "c/orphan\x00" + other.Agent.AgentID:   nil,
	}
	err := s.bdb.Update(func(txn *badger.Txn) error {
		for k, v := range bad {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, o)
	if n := s2.Len(); n != 1 {
		t.Fatalf("Len = %d, want only the good entry", n)
	}
	if got, err := s2.Query(ctx, Filter{}); err != nil || len(got) != 1 {
		t.Fatalf("Query: %v %v", ids(got), err)
	}
	if got, err := s2.Locals(ctx); err != nil || len(got) != 1 {
		t.Fatalf("Locals: %v %v", len(got), err)
	}
	if _, ok, err := s2.GetTombstone(ctx, other.Agent.AgentID); ok || err != nil {
		t.Fatalf("corrupt tombstone: %v %v", ok, err)
	}
	if _, _, err := s2.GetPin(other.Agent.AgentID); !errors.Is(err, errCorrupt) {
		t.Fatalf("corrupt pin must be an error, got %v", err)
	}
	if p, err := s2.Peers(ctx); err != nil || len(p) != 0 {
		t.Fatalf("Peers: %v %v", p, err)
	}
	// The corrupt cache values and the orphan posting are gone.
	for _, k := range []string{spaceCache + "11111111-1111-4111-8111-111111111111", spaceIndex + "c/orphan\x00" + other.Agent.AgentID} {
		if _, err := s2.get([]byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%q survived open: %v", k, err)
		}
	}
}

// TestOpenRepairsIndex removes postings and checks Open writes them back.
func TestOpenRepairsIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	o := Options{Now: clk.Now}
	s := openTest(t, dir, o)
	sa := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"a", "b"}})
	if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	want := countIndexKeys(t, s, sa.Agent.AgentID)
	if err := s.bdb.DropPrefix([]byte(spaceIndex)); err != nil {
		t.Fatal(err)
	}
	if got := countIndexKeys(t, s, sa.Agent.AgentID); len(got) != 0 {
		t.Fatal("DropPrefix left postings")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, o)
	if got := countIndexKeys(t, s2, sa.Agent.AgentID); !mapsEqual(got, want) {
		t.Fatalf("postings after repair %v, want %v", got, want)
	}
}

func TestOpenRefusesForeignData(t *testing.T) {
	dir := t.TempDir()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(txn *badger.Txn) error { return txn.Set([]byte("foo"), []byte("bar")) }); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(Options{Dir: dir, Logger: testLogger(t)}); err == nil {
		_ = s.Close()
		t.Fatal("opened a Badger directory without a schema version")
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{{CacheTTL: -1}, {MaxEntries: -1}, {MaxPeers: -2}, {SweepInterval: -time.Second}} {
		if s, err := Open(o); err == nil {
			_ = s.Close()
			t.Errorf("%+v accepted", o)
		}
	}
}

func ExampleOpen() {
	s, err := Open(Options{}) // in memory
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Close() }()
	fmt.Println(s.Len())
	// Output: 0
}

func TestLeases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	a, b := mkRecord(t, agentSpec{}).Agent.AgentID, mkRecord(t, agentSpec{}).Agent.AgentID
	until := time.Date(2026, 5, 1, 10, 0, 0, 123, time.UTC)
	for _, id := range []string{a, b} {
		if err := s.PutLease(ctx, id, until); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutLease(ctx, b, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLease(ctx, b, time.Time{}); err != nil {
		t.Fatalf("removing an absent lease: %v", err)
	}
	if err := s.PutLease(ctx, "x", until); record.FieldOf(err) != "agent_id" {
		t.Fatalf("bad id: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, Options{})
	got, err := s2.Leases(ctx)
	if err != nil || len(got) != 1 || !got[a].Equal(until) {
		t.Fatalf("leases after reopen: %v %v", got, err)
	}
}

// TestLargestRecordFits: a record near the size limit, with the most
// index terms a record can have, is stored, replaced and read back in
// both modes (in memory the memtable is 512 KiB, so one transaction
// holds at most 76.8 KiB: the record and every posting, added and
// removed, must fit).
func TestLargestRecordFits(t *testing.T) {
	modes(t, func(t *testing.T, dir func() string) {
		ctx := context.Background()
		clk := newClock()
		s := openTest(t, dir(), Options{Now: clk.Now})
		var skills []record.Skill
		for i := range record.MaxSkills {
			var caps []string
			for j := range 6 {
				caps = append(caps, fmt.Sprintf("domain-%02d.capability-number-%02d-with-a-long-name", i, j))
			}
			skills = append(skills, skill(fmt.Sprintf("skill-%02d-with-a-long-identifier", i), "1.0.0", record.SkillTool, []string{fmt.Sprintf("scene-%02d", i)}, caps...))
		}
		var tags []string
		for i := range record.MaxTags {
			tags = append(tags, fmt.Sprintf("tag-%02d", i))
		}
		sa := mkRecord(t, agentSpec{issued: clk.Now(), skills: skills, tags: tags})
		if n := len(sa.Canonical()); n < record.MaxAgentBytes*3/4 {
			t.Fatalf("record of %d bytes: want one near the %d-byte limit", n, record.MaxAgentBytes)
		}
		for seq := uint64(1); seq <= 3; seq++ {
			rec := sa
			if seq > 1 {
				rec = resign(t, sa, seq, nil)
			}
			if err := s.PutLocal(ctx, rec); err != nil {
				t.Fatalf("PutLocal seq %d (%d bytes): %v", seq, len(rec.Canonical()), err)
			}
			if err := s.Put(ctx, Entry{Record: rec, Source: SourceGossip}); err != nil {
				t.Fatalf("Put seq %d: %v", seq, err)
			}
		}
		got, err := s.Locals(ctx)
		if err != nil || len(got) != 1 || got[0].Agent.Seq != 3 {
			t.Fatalf("Locals: %v, %v", got, err)
		}
	})
}

// isCompact reports whether sa derives its canonical bytes (Compact) rather
// than holding them: each call then returns a fresh slice.
func isCompact(sa *record.SignedAgent) bool {
	first, second := sa.Canonical(), sa.Canonical()
	return &first[0] != &second[0]
}

// TestLocalRanges: the ranges EachLocal reads in parallel hold every key
// of the space once, whatever its first byte, for any number of cores.
func TestLocalRanges(t *testing.T) {
	for n := 1; n <= 20; n++ {
		rs := localRanges(n)
		if want := min(n, 16); len(rs) != want {
			t.Fatalf("%d cores: %d ranges, want %d", n, len(rs), want)
		}
		for c := range 256 {
			key := []byte(spaceLocal + string([]byte{byte(c)}) + "rest")
			in := 0
			for _, r := range rs {
				if bytes.Compare(key, r[0]) >= 0 && (r[1] == nil || bytes.Compare(key, r[1]) < 0) {
					in++
				}
			}
			if in != 1 {
				t.Fatalf("%d cores: key %q in %d ranges: %q", n, key, in, rs)
			}
		}
		if !bytes.Equal(rs[0][0], []byte(spaceLocal)) || rs[len(rs)-1][1] != nil {
			t.Fatalf("%d cores: the ranges do not span the space: %q", n, rs)
		}
	}
}

// TestEachLocalMany: every registration comes back once, across the
// ranges the cores read, with the cache's records and another space's
// keys left out; one this version cannot compact (a newer signer's
// member) keeps its own bytes, and still verifies after the read.
func TestEachLocalMany(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	want := map[string]bool{}
	for i := range 300 {
		sa := mkRecord(t, agentSpec{issued: time.Now(), name: fmt.Sprintf("agent-%d", i)})
		if err := s.PutLocal(ctx, sa); err != nil {
			t.Fatal(err)
		}
		want[sa.Agent.AgentID] = true
	}
	if err := s.Put(ctx, Entry{Record: mkRecord(t, agentSpec{issued: time.Now()}), Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	id := sharedIdentity(t)
	canon := mkRecord(t, agentSpec{issued: time.Now()}).Canonical()
	canon = append([]byte(`{"a_newer_member":1,`), canon[1:]...)
	sig, err := record.SignBytes(id.AgentKey, canon)
	if err != nil {
		t.Fatal(err)
	}
	psig, err := id.PeerKey.Sign(canon)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := record.FromAnnounce(record.Announce{ProtocolVersion: record.ProtocolVersion, Agent: canon,
		Signature: base64.StdEncoding.EncodeToString(sig), PeerSignature: base64.StdEncoding.EncodeToString(psig)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutLocal(ctx, newer); err != nil {
		t.Fatal(err)
	}
	want[newer.Agent.AgentID] = true
	var held *record.SignedAgent
	for _, procs := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			got := map[string]int{}
			held = nil
			if err := s.EachLocal(ctx, func(sa *record.SignedAgent) {
				got[sa.Agent.AgentID]++
				if sa.Agent.AgentID == newer.Agent.AgentID {
					held = sa
				} else if !isCompact(sa) {
					t.Errorf("%s is not compact", sa.Agent.AgentID)
				}
			}); err != nil {
				t.Fatal(err)
			}
			for id := range want {
				if got[id] != 1 {
					t.Fatalf("%s came back %d times", id, got[id])
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d registrations back, %d stored", len(got), len(want))
			}
			if held == nil || isCompact(held) || !bytes.Equal(held.Canonical(), canon) || held.VerifySignatures() != nil {
				t.Fatal("the record with a newer member lost its bytes")
			}
		})
	}
	// Its bytes are its own, not Badger's (unmapped when the store closes).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(held.Canonical(), canon) {
		t.Fatal("the record's bytes changed when the store closed")
	}
}
