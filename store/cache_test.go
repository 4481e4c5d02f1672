package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
)

// modes runs a test against an in-memory and an on-disk store.
func modes(t *testing.T, fn func(t *testing.T, dir func() string)) {
	t.Run("mem", func(t *testing.T) { fn(t, func() string { return "" }) })
	t.Run("disk", func(t *testing.T) {
		d := t.TempDir()
		fn(t, func() string { return d })
	})
}

func TestPutGet(t *testing.T) {
	modes(t, func(t *testing.T, dir func() string) {
		ctx := context.Background()
		clk := newClock()
		s := openTest(t, dir(), Options{Now: clk.Now})
		sa := mkRecord(t, agentSpec{issued: clk.Now()})
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
		e, err := s.Get(ctx, sa.Agent.AgentID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Record != sa || e.Source != SourceGossip || e.Stale {
			t.Fatalf("got %+v", e)
		}
		if !e.ReceivedAt.Equal(clk.Now()) || !e.ExpiresAt.Equal(clk.Now().Add(DefaultCacheTTL)) {
			t.Fatalf("times: received %v expires %v", e.ReceivedAt, e.ExpiresAt)
		}
		if n := s.Len(); n != 1 {
			t.Fatalf("Len = %d", n)
		}
		if _, err := s.Get(ctx, uuid.NewString()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get unknown: %v", err)
		}
	})
}

func TestExpiresAtIsEarlierOfRecordAndCacheTTL(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, CacheTTL: time.Hour})
	// Record valid 10 minutes, cache TTL 1 h: the record's expiry wins.
	short := mkRecord(t, agentSpec{issued: clk.Now(), ttl: 10 * time.Minute})
	if err := s.Put(ctx, Entry{Record: short, Source: SourceDHT}); err != nil {
		t.Fatal(err)
	}
	e, _ := s.Get(ctx, short.Agent.AgentID)
	if want := clk.Now().Add(10 * time.Minute); !e.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt %v, want %v", e.ExpiresAt, want)
	}
	// A caller-given earlier ExpiresAt wins; a later one is ignored.
	long := mkRecord(t, agentSpec{issued: clk.Now(), ttl: 2 * time.Hour})
	if err := s.Put(ctx, Entry{Record: long, Source: SourceDHT, ExpiresAt: clk.Now().Add(5 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e, _ = s.Get(ctx, long.Agent.AgentID)
	if want := clk.Now().Add(time.Hour); !e.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt %v, want %v", e.ExpiresAt, want)
	}
	other := mkRecord(t, agentSpec{issued: clk.Now()})
	if err := s.Put(ctx, Entry{Record: other, Source: SourceDHT, ExpiresAt: clk.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	e, _ = s.Get(ctx, other.Agent.AgentID)
	if want := clk.Now().Add(time.Minute); !e.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt %v, want %v", e.ExpiresAt, want)
	}
}

func TestPutSeqRules(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now})
	v5 := mkRecord(t, agentSpec{seq: 5, issued: clk.Now()})
	id := v5.Agent.AgentID
	if err := s.Put(ctx, Entry{Record: v5, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	v4 := resign(t, v5, 4, nil)
	if err := s.Put(ctx, Entry{Record: v4, Source: SourceGossip}); !errors.Is(err, ErrOlder) {
		t.Fatalf("older put: %v", err)
	}
	// Equal seq refreshes ReceivedAt, ExpiresAt and Source.
	clk.Add(time.Minute)
	if err := s.Put(ctx, Entry{Record: v5, Source: SourceDHT}); err != nil {
		t.Fatal(err)
	}
	e, _ := s.Get(ctx, id)
	if e.Source != SourceDHT || !e.ReceivedAt.Equal(clk.Now()) || !e.ExpiresAt.Equal(clk.Now().Add(DefaultCacheTTL)) || e.Record.Agent.Seq != 5 {
		t.Fatalf("after refresh: %+v", e)
	}
	// The refresh also works on a stale entry.
	clk.Add(DefaultCacheTTL + time.Second)
	if e, _ := s.Get(ctx, id); !e.Stale {
		t.Fatal("entry should be stale")
	}
	if err := s.Put(ctx, Entry{Record: v5, Source: SourceLAN}); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(ctx, id); e.Stale || e.Source != SourceLAN {
		t.Fatalf("refresh of stale entry: %+v", e)
	}
	// A stale entry with a higher seq still refuses an older record.
	clk.Add(DefaultCacheTTL + time.Second)
	if err := s.Put(ctx, Entry{Record: v4, Source: SourceGossip}); !errors.Is(err, ErrOlder) {
		t.Fatalf("older put over stale: %v", err)
	}
	v6 := resign(t, v5, 6, nil)
	if err := s.Put(ctx, Entry{Record: v6, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(ctx, id); e.Record.Agent.Seq != 6 || s.Len() != 1 {
		t.Fatalf("newer put: seq %d len %d", e.Record.Agent.Seq, s.Len())
	}
}

func TestPutRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now})
	sa := mkRecord(t, agentSpec{issued: clk.Now()})
	cases := []struct {
		name  string
		e     Entry
		field string
		is    error
	}{
		{"nil record", Entry{Source: SourceGossip}, "record", nil},
		{"unknown source", Entry{Record: sa, Source: "carrier-pigeon"}, "source", nil},
		{"no source", Entry{Record: sa}, "source", nil},
		{"no canonical", Entry{Record: &record.SignedAgent{Agent: sa.Agent}, Source: SourceGossip}, "record", nil},
		{"bad canonical", Entry{Record: withCanonical(sa, "{"), Source: SourceGossip}, "record", nil},
		{"received far future", Entry{Record: sa, Source: SourceGossip, ReceivedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, "received_at", nil},
		{"expired", Entry{Record: sa, Source: SourceGossip, ReceivedAt: clk.Now().Add(-48 * time.Hour)}, "", ErrExpired},
	}
	for _, c := range cases {
		err := s.Put(ctx, Entry(c.e))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if c.field != "" && record.FieldOf(err) != c.field {
			t.Errorf("%s: error %v names field %q, want %q", c.name, err, record.FieldOf(err), c.field)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: error %v is not %v", c.name, err, c.is)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after refused puts", s.Len())
	}
}

func TestStaleAndDrop(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, CacheTTL: 10 * time.Second, StaleGrace: 5 * time.Second, SweepInterval: time.Hour})
	sa := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"t1"}})
	id := sa.Agent.AgentID
	if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Second)
	e, err := s.Get(ctx, id)
	if err != nil || !e.Stale {
		t.Fatalf("at expiry: %+v %v", e, err)
	}
	if got, _ := s.Query(ctx, Filter{Tags: []string{"t1"}}); len(got) != 0 {
		t.Fatalf("stale entry returned without IncludeStale: %v", ids(got))
	}
	if got, _ := s.Query(ctx, Filter{Tags: []string{"t1"}, IncludeStale: true}); len(got) != 1 || !got[0].Stale {
		t.Fatalf("IncludeStale: %+v", got)
	}
	if err := s.Touch(ctx, id, clk.Now().Add(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Touch of a stale entry: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d inside the grace window", s.Len())
	}
	clk.Add(5 * time.Second)
	if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after grace: %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after grace", s.Len())
	}
	if _, err := s.get(cacheKey(id)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("badger still holds the value: %v", err)
	}
	if keys := countIndexKeys(t, s, id); len(keys) != 0 {
		t.Fatalf("postings left after drop: %v", keys)
	}
}

// TestBadgerNativeTTL checks that Badger itself forgets an entry after
// its grace window, with no sweep running (the sweep interval is an hour):
// this is what bounds the data a killed daemon leaves behind.
func TestBadgerNativeTTL(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{CacheTTL: time.Second, StaleGrace: time.Second, SweepInterval: time.Hour})
	sa := mkRecord(t, agentSpec{issued: time.Now(), skills: []record.Skill{skill("sk", "1.0.0", record.SkillTool, []string{"sc"}, "cp")}})
	id := sa.Agent.AgentID
	if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.get(cacheKey(id)); err != nil {
		t.Fatal(err)
	}
	if len(countIndexKeys(t, s, id)) == 0 {
		t.Fatal("no postings written")
	}
	eventually(t, "badger TTL to drop the value and postings", func() bool {
		_, err := s.get(cacheKey(id))
		return errors.Is(err, ErrNotFound) && len(countIndexKeys(t, s, id)) == 0
	})
}

func TestTouch(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, CacheTTL: time.Minute})
	sa := mkRecord(t, agentSpec{issued: clk.Now()})
	id := sa.Agent.AgentID
	if err := s.Touch(ctx, id, clk.Now().Add(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Touch unknown: %v", err)
	}
	if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	clk.Add(30 * time.Second)
	want := clk.Now().Add(45 * time.Second)
	if err := s.Touch(ctx, id, want); err != nil {
		t.Fatal(err)
	}
	e, _ := s.Get(ctx, id)
	if !e.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt %v, want %v", e.ExpiresAt, want)
	}
	// Bounded by now+CacheTTL.
	if err := s.Touch(ctx, id, clk.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(ctx, id); !e.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("Touch not bounded by CacheTTL: %v", e.ExpiresAt)
	}
	if len(countIndexKeys(t, s, id)) == 0 {
		t.Fatal("postings lost by Touch")
	}
	// A time in the past makes the entry stale now, and it stays in its
	// grace window.
	if err := s.Touch(ctx, id, clk.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, id)
	if err != nil || !e.Stale || !e.ExpiresAt.Equal(clk.Now()) {
		t.Fatalf("after Touch to the past: %+v %v", e, err)
	}
	if got, _ := s.Query(ctx, Filter{}); len(got) != 0 {
		t.Fatalf("stale entry still fresh in Query: %v", ids(got))
	}
	if err := s.Touch(ctx, id, clk.Now().Add(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Touch revived a stale entry: %v", err)
	}
}

func TestEvictsSoonestToExpire(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, MaxEntries: 3, CacheTTL: time.Hour})
	put := func(ttl time.Duration) string {
		t.Helper()
		sa := mkRecord(t, agentSpec{issued: clk.Now(), ttl: ttl})
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
		return sa.Agent.AgentID
	}
	a := put(40 * time.Minute)
	b := put(10 * time.Minute)
	c := put(30 * time.Minute)
	d := put(20 * time.Minute) // cache over its bound: b expires soonest
	if s.Len() != 3 {
		t.Fatalf("Len = %d", s.Len())
	}
	if _, err := s.Get(ctx, b); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b not evicted: %v", err)
	}
	if keys := countIndexKeys(t, s, b); len(keys) != 0 {
		t.Fatalf("evicted entry keeps postings %v", keys)
	}
	// A newcomer that expires sooner than everything is itself the victim.
	e := put(5 * time.Minute)
	if _, err := s.Get(ctx, e); !errors.Is(err, ErrNotFound) {
		t.Fatalf("newcomer kept: %v", err)
	}
	// Touch moves an entry back in the order: d is now the latest.
	if err := s.Touch(ctx, d, clk.Now().Add(50*time.Minute)); err != nil {
		t.Fatal(err)
	}
	put(35 * time.Minute) // evicts c (30 min)
	for _, id := range []string{a, d} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("%s evicted: %v", id, err)
		}
	}
	if _, err := s.Get(ctx, c); !errors.Is(err, ErrNotFound) {
		t.Fatalf("c not evicted: %v", err)
	}
}

func TestIndexFollowsUpdates(t *testing.T) {
	modes(t, func(t *testing.T, dir func() string) {
		ctx := context.Background()
		clk := newClock()
		s := openTest(t, dir(), Options{Now: clk.Now})
		v1 := mkRecord(t, agentSpec{issued: clk.Now(), tags: []string{"blue"}, tenant: "acme",
			skills: []record.Skill{skill("search", "1.0.0", record.SkillTool, []string{"web"}, "find", "rank")}})
		id := v1.Agent.AgentID
		if err := s.Put(ctx, Entry{Record: v1, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"c/find": true, "c/rank": true, "s/search": true, "n/web": true, "y/tool-skill": true, "g/blue": true, "m/acme": true}
		if got := countIndexKeys(t, s, id); !mapsEqual(got, want) {
			t.Fatalf("postings %v, want %v", got, want)
		}
		// v2 drops rank, the scene, the tag and the tenant, adds a skill.
		v2 := resign(t, v1, 2, func(a *record.Agent) {
			a.Skills = []record.Skill{
				skill("search", "1.1.0", record.SkillTool, nil, "find"),
				skill("crm", "2.0.0", record.SkillEnterprise, nil, "contacts"),
			}
			a.Capabilities = map[string]string{}
			a.Tags = []string{"green"}
			a.TenantScope = ""
		})
		if err := s.Put(ctx, Entry{Record: v2, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
		want = map[string]bool{"c/find": true, "c/contacts": true, "s/search": true, "s/crm": true, "y/tool-skill": true, "y/enterprise-skill": true, "g/green": true}
		if got := countIndexKeys(t, s, id); !mapsEqual(got, want) {
			t.Fatalf("postings after update %v, want %v", got, want)
		}
		for _, f := range []Filter{{Capability: "rank"}, {Scene: "web"}, {Tags: []string{"blue"}}, {Tenant: "acme"}} {
			if got, err := s.Query(ctx, f); err != nil || len(got) != 0 {
				t.Fatalf("old term %+v still matches: %v %v", f, ids(got), err)
			}
		}
		if got, _ := s.Query(ctx, Filter{Capability: "contacts"}); len(got) != 1 {
			t.Fatalf("new term does not match: %v", ids(got))
		}
		if s.counts["crank"] != 0 || s.counts["ccontacts"] != 1 {
			t.Fatalf("counts: %v", s.counts)
		}
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got := countIndexKeys(t, s, id); len(got) != 0 {
			t.Fatalf("postings after delete %v", got)
		}
		if len(s.counts) != 0 || s.expiry.Len() != 0 {
			t.Fatalf("view after delete: counts %v heap %d", s.counts, s.expiry.Len())
		}
		if err := s.Delete(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func TestTombstones(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, TombstoneTTL: time.Hour})
	v3 := mkRecord(t, agentSpec{seq: 3, issued: clk.Now()})
	id := v3.Agent.AgentID
	if err := s.Put(ctx, Entry{Record: v3, Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}
	// A tombstone older than the entry keeps it.
	if err := s.PutTombstone(ctx, Tombstone{AgentID: id, Seq: 2, Reason: record.ReasonShutdown}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatalf("entry deleted by an older tombstone: %v", err)
	}
	// One at the entry's seq deletes it, postings included.
	if err := s.PutTombstone(ctx, Tombstone{AgentID: id, Seq: 3, Reason: record.ReasonShutdown}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("entry survives its tombstone: %v", err)
	}
	if keys := countIndexKeys(t, s, id); len(keys) != 0 {
		t.Fatalf("postings survive the tombstone: %v", keys)
	}
	tb, ok, err := s.GetTombstone(ctx, id)
	if err != nil || !ok || tb.Seq != 3 || tb.Reason != record.ReasonShutdown || !tb.At.Equal(clk.Now()) {
		t.Fatalf("GetTombstone: %+v %v %v", tb, ok, err)
	}
	// Replays at or below the tombstone are refused; newer records pass.
	for _, seq := range []uint64{2, 3} {
		if err := s.Put(ctx, Entry{Record: resign(t, v3, seq, nil), Source: SourceGossip}); !errors.Is(err, ErrTombstoned) {
			t.Fatalf("replay of seq %d: %v", seq, err)
		}
	}
	// A lower tombstone does not replace a higher one.
	if err := s.PutTombstone(ctx, Tombstone{AgentID: id, Seq: 1, Reason: record.ReasonError}); err != nil {
		t.Fatal(err)
	}
	if tb, _, _ := s.GetTombstone(ctx, id); tb.Seq != 3 {
		t.Fatalf("tombstone lowered to %d", tb.Seq)
	}
	v4 := resign(t, v3, 4, nil)
	if err := s.Put(ctx, Entry{Record: v4, Source: SourceGossip}); err != nil {
		t.Fatalf("newer record after tombstone: %v", err)
	}
	// Tombstones expire.
	clk.Add(time.Hour)
	if _, ok, _ := s.GetTombstone(ctx, id); ok {
		t.Fatal("tombstone outlived TombstoneTTL")
	}
	if err := s.PutTombstone(ctx, Tombstone{AgentID: "nope", Seq: 1}); record.FieldOf(err) != "agent_id" {
		t.Fatalf("bad agent id: %v", err)
	}
	if err := s.PutTombstone(ctx, Tombstone{AgentID: id, Seq: 9, Reason: "BORED"}); record.FieldOf(err) != "reason" {
		t.Fatalf("bad reason: %v", err)
	}
}

func TestRefreshHook(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now, CacheTTL: 300 * time.Second, RefreshBefore: 60 * time.Second, SweepInterval: time.Millisecond})
	var mu sync.Mutex
	calls := map[string]int{}
	var last Entry
	s.OnRefresh(func(e Entry) {
		// Hooks may use the store: read the entry back.
		if _, err := s.Get(ctx, e.Record.Agent.AgentID); err != nil {
			t.Errorf("Get from hook: %v", err)
		}
		mu.Lock()
		calls[e.Record.Agent.AgentID]++
		last = e
		mu.Unlock()
	})
	count := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[id]
	}
	waitSweeps := func(n uint64) {
		start := s.sweeps.Load()
		eventually(t, "sweeps", func() bool { return s.sweeps.Load() >= start+n })
	}
	a := mkRecord(t, agentSpec{issued: clk.Now()})
	b := mkRecord(t, agentSpec{issued: clk.Now()})
	for _, sa := range []*record.SignedAgent{a, b} {
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(239 * time.Second)
	waitSweeps(2)
	if count(a.Agent.AgentID) != 0 {
		t.Fatal("hook fired before RefreshBefore")
	}
	// b gets a heartbeat: only a is due at 240 s.
	if err := s.Touch(ctx, b.Agent.AgentID, clk.Now().Add(200*time.Second)); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	eventually(t, "refresh hook", func() bool { return count(a.Agent.AgentID) == 1 })
	waitSweeps(3)
	if count(a.Agent.AgentID) != 1 || count(b.Agent.AgentID) != 0 {
		t.Fatalf("calls %v", calls)
	}
	mu.Lock()
	if last.Stale || last.Record != a {
		t.Fatalf("hook entry %+v", last)
	}
	mu.Unlock()
	// A Touch re-arms the hook for the new expiry.
	if err := s.Touch(ctx, a.Agent.AgentID, clk.Now().Add(100*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitSweeps(2)
	if count(a.Agent.AgentID) != 1 {
		t.Fatal("hook fired before the new refresh time")
	}
	clk.Add(40 * time.Second)
	eventually(t, "re-armed hook", func() bool { return count(a.Agent.AgentID) == 2 })
	// Stale entries never fire.
	clk.Add(time.Hour)
	waitSweeps(2)
	if count(b.Agent.AgentID) != 0 {
		t.Fatalf("hook fired for b: %v", calls)
	}
}

func TestLenAndConcurrency(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", Options{MaxEntries: 50})
	recs := make([]*record.SignedAgent, 80)
	for i := range recs {
		recs[i] = mkRecord(t, agentSpec{issued: time.Now(), tags: []string{"x"}})
	}
	var wg sync.WaitGroup
	var errs atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(recs); i += 4 {
				if err := s.Put(ctx, Entry{Record: recs[i], Source: SourceGossip}); err != nil {
					errs.Add(1)
				}
				if _, err := s.Query(ctx, Filter{Tags: []string{"x"}, Limit: 10}); err != nil {
					errs.Add(1)
				}
				_ = s.Touch(ctx, recs[i].Agent.AgentID, time.Now().Add(time.Minute))
				if i%5 == 0 {
					_ = s.Delete(ctx, recs[i].Agent.AgentID)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d errors", errs.Load())
	}
	n := s.Len()
	got, err := s.Query(ctx, Filter{})
	if err != nil || len(got) != n || n > 50 {
		t.Fatalf("Len %d, Query %d (%v)", n, len(got), err)
	}
	if !slices.IsSortedFunc(got, func(a, b Entry) int {
		return compareStrings(a.Record.Agent.AgentID, b.Record.Agent.AgentID)
	}) {
		t.Fatal("query not ordered by agent id")
	}
	if s.counts["gx"] != n {
		t.Fatalf("tag count %d, entries %d", s.counts["gx"], n)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s, err := Open(Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	sa := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	checks := map[string]error{
		"Put":          s.Put(ctx, Entry{Record: sa, Source: SourceGossip}),
		"PutLocal":     s.PutLocal(ctx, sa),
		"Touch":        s.Touch(ctx, sa.Agent.AgentID, time.Now()),
		"Delete":       s.Delete(ctx, sa.Agent.AgentID),
		"PutTombstone": s.PutTombstone(ctx, Tombstone{AgentID: sa.Agent.AgentID, Seq: 1}),
		"PutPeer":      s.PutPeer(ctx, PeerRecord{ID: sharedIdentity(t).PeerID}),
		"PutLease":     s.PutLease(ctx, sa.Agent.AgentID, time.Now()),
	}
	_, checks["Leases"] = s.Leases(ctx)
	_, checks["Get"] = s.Get(ctx, sa.Agent.AgentID)
	_, checks["Query"] = s.Query(ctx, Filter{})
	_, checks["Locals"] = s.Locals(ctx)
	_, checks["NextSeq"] = s.NextSeq(ctx, sa.Agent.AgentID)
	_, checks["Peers"] = s.Peers(ctx)
	_, _, checks["GetPin"] = s.GetPin(sa.Agent.AgentID)
	_, _, checks["GetTombstone"] = s.GetTombstone(ctx, sa.Agent.AgentID)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if s.Len() != 0 {
		t.Error("Len after Close")
	}
}

func TestContextCancelled(t *testing.T) {
	s := openTest(t, "", Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Query(ctx, Filter{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Query with cancelled ctx: %v", err)
	}
}

func TestRecordsGauge(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	m := metrics.New(false)
	s := openTest(t, "", Options{Now: clk.Now, Metrics: m, CacheTTL: time.Minute, SweepInterval: time.Millisecond})
	for _, ttl := range []time.Duration{time.Hour, time.Hour, 30 * time.Second} {
		if err := s.Put(ctx, Entry{Record: mkRecord(t, agentSpec{issued: clk.Now(), ttl: ttl}), Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(45 * time.Second)
	gauge := func(state string) float64 {
		var d dto.Metric
		if err := m.Records.WithLabelValues(state).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue()
	}
	eventually(t, "records gauge", func() bool { return gauge("fresh") == 2 && gauge("stale") == 1 })
}

// withCanonical is a copy of sa with other canonical bytes.
func withCanonical(sa *record.SignedAgent, canon string) *record.SignedAgent {
	c := &record.SignedAgent{Agent: sa.Agent}
	c.SetCanonical([]byte(canon))
	return c
}
