package view

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a manual clock for the liveness tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type fixture struct {
	t   *testing.T
	v   *View
	st  store.Store
	clk *clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clk := &clock{t: time.Now()}
	st, err := store.Open(store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	v := New(Config{Now: clk.Now}, st, nil, nil, nil)
	t.Cleanup(func() { _ = v.Close() })
	return &fixture{t: t, v: v, st: st, clk: clk}
}

type agentKeys struct {
	id *trust.Identity
}

func newAgent(t *testing.T) *agentKeys {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return &agentKeys{id: id}
}

func conf(f float64) *float64 { return &f }

// sign builds a record with one skill offering caps (confidence hints
// given per capability) in the scenes.
func (k *agentKeys) sign(t *testing.T, seq uint64, now time.Time, scenes []string, caps map[string]float64) *record.SignedAgent {
	t.Helper()
	sk := record.Skill{SkillID: "skill-x", Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "10.0.0.1:8080", Scenes: scenes}
	for c, h := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c, ConfidenceHint: conf(h)})
	}
	a := &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"}, Skills: []record.Skill{sk}}
	a.Fill(k.id.AgentID, k.id.PeerID.String(), k.id.PublicKeyPEM(), seq, now, time.Hour)
	sa, err := k.id.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func (k *agentKeys) beat(t *testing.T, seq uint64, st record.Status, reason record.UnregisterReason) *record.SignedBeat {
	t.Helper()
	sb, err := record.SignBeat(record.Beat{AgentID: k.id.AgentID, PeerID: k.id.PeerID.String(), Seq: seq, Status: st, Reason: reason, Timestamp: time.Now().UnixMilli()}, k.id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// next returns the next event or fails.
func next(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e, ok := <-s.C():
		if !ok {
			t.Fatalf("subscription closed: %v", s.Err())
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func expectNone(t *testing.T, s *Subscription) {
	t.Helper()
	select {
	case e := <-s.C():
		t.Fatalf("unexpected event %+v", e)
	default:
	}
}

func TestLivenessUnhealthyThenTimeout(t *testing.T) {
	f := newFixture(t)
	sub := f.v.Subscribe(Filter{}, 64)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"cap.a": 0.5})
	if err := f.v.CheckAnnounce(sa); err != nil {
		t.Fatal(err)
	}
	f.v.Announce(sa, k.id.PeerID, "")
	if e := next(t, sub); e.Type != EventRegistered || e.AgentID != k.id.AgentID {
		t.Fatalf("got %+v", e)
	}
	if e := next(t, sub); e.Type != EventCapabilityChanged || e.Capability != "cap.a" || e.Change != "added" {
		t.Fatalf("got %+v", e)
	}
	// Heartbeats keep it healthy.
	for i := uint64(1); i <= 3; i++ {
		f.clk.Add(5 * time.Second)
		f.v.Beat(KindHeartbeat, k.beat(t, 10+i, "", ""), k.id.PeerID, "")
		f.v.sweep()
	}
	expectNone(t, sub) // heartbeat events are opt-in
	if a, _ := f.v.Get(k.id.AgentID); a.Status != record.StatusHealthy {
		t.Fatalf("status %s", a.Status)
	}
	// Three missed intervals: UNHEALTHY, still listed.
	f.clk.Add(15*time.Second + time.Millisecond)
	f.v.sweep()
	if e := next(t, sub); e.Type != EventStatus || e.Status != record.StatusUnhealthy {
		t.Fatalf("got %+v", e)
	}
	if got := f.v.Lookup("cap.a"); len(got) != 1 || got[0].Status != record.StatusUnhealthy {
		t.Fatalf("lookup %+v", got)
	}
	// A heartbeat revives it.
	f.v.Beat(KindHeartbeat, k.beat(t, 20, "", ""), k.id.PeerID, "")
	if e := next(t, sub); e.Type != EventStatus || e.Status != record.StatusHealthy {
		t.Fatalf("got %+v", e)
	}
	// Silence past the timeout: gone, capability removed, cache stale.
	f.clk.Add(15*time.Second + time.Millisecond)
	f.v.sweep()
	if e := next(t, sub); e.Type != EventStatus || e.Status != record.StatusUnhealthy {
		t.Fatalf("got %+v", e)
	}
	f.clk.Add(15 * time.Second)
	f.v.sweep()
	if e := next(t, sub); e.Type != EventDeregistered || e.Reason != ReasonTimeout {
		t.Fatalf("got %+v", e)
	}
	if e := next(t, sub); e.Type != EventCapabilityChanged || e.Change != "removed" {
		t.Fatalf("got %+v", e)
	}
	if f.v.Len() != 0 {
		t.Fatal("agent still live")
	}
	e, err := f.st.Get(context.Background(), k.id.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Stale {
		t.Fatal("cached record of a departed agent should be stale")
	}
}

func TestUnregisterTombstoneRejectsReplay(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"cap.a": 0})
	f.v.Announce(sa, k.id.PeerID, "")
	sub := f.v.Subscribe(Filter{}, 16)
	un := k.beat(t, 12, "", record.ReasonMaintenance)
	if err := f.v.CheckBeat(KindUnregister, un); err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindUnregister, un, k.id.PeerID, "")
	if e := next(t, sub); e.Type != EventDeregistered || e.Reason != "MAINTENANCE" {
		t.Fatalf("got %+v", e)
	}
	// The old announcement replayed after the unregister is not news.
	err := f.v.CheckAnnounce(sa)
	var re *trust.RejectError
	if !errors.As(err, &re) || re.Reason != trust.ReasonReplay {
		t.Fatalf("replay accepted: %v", err)
	}
	if err := f.v.CheckBeat(KindHeartbeat, k.beat(t, 11, "", "")); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("old heartbeat accepted: %v", err)
	}
	if err := f.v.Learn(sa, store.SourceDHT, true); err == nil || f.v.Len() != 0 {
		t.Fatalf("learn of tombstoned record: %v, live=%d", err, f.v.Len())
	}
	// A newer registration is news again.
	sa2 := k.sign(t, 13, f.clk.Now(), nil, map[string]float64{"cap.a": 0})
	if err := f.v.CheckAnnounce(sa2); err != nil {
		t.Fatal(err)
	}
	f.v.Announce(sa2, k.id.PeerID, "")
	if f.v.Len() != 1 {
		t.Fatal("re-registration not applied")
	}
}

func TestCheckOrdering(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"c": 0})
	f.v.Announce(sa, k.id.PeerID, "")
	if err := f.v.CheckAnnounce(sa); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("same seq accepted: %v", err)
	}
	if err := f.v.CheckBeat(KindHeartbeat, k.beat(t, 9, "", "")); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("beat older than record accepted: %v", err)
	}
	b := k.beat(t, 11, "", "")
	if err := f.v.CheckBeat(KindHeartbeat, b); err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, b, k.id.PeerID, "")
	if err := f.v.CheckBeat(KindHeartbeat, b); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("duplicate beat accepted: %v", err)
	}
	// A local agent's messages coming back are never news.
	l := newAgent(t)
	f.v.ApplyLocal(l.sign(t, 5, f.clk.Now(), nil, map[string]float64{"c": 0}))
	if err := f.v.CheckAnnounce(l.sign(t, 6, f.clk.Now(), nil, map[string]float64{"c": 0})); err == nil {
		t.Fatal("announce of a hosted agent accepted from the network")
	}
}

func TestUnknownAgentBeat(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	var got []string
	f.v.OnUnknownAgent(func(id string, _ peer.ID, _ time.Duration) { got = append(got, id) })
	f.v.Beat(KindHeartbeat, k.beat(t, 5, "", ""), k.id.PeerID, "")
	if len(got) != 1 || got[0] != k.id.AgentID {
		t.Fatalf("unknown-agent hook calls: %v", got)
	}
	// A heartbeat of an agent in the cache (a restart) restores it.
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"c": 0})
	if err := f.v.Learn(sa, store.SourceGossip, false); err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, k.beat(t, 11, "", ""), k.id.PeerID, "")
	if f.v.Len() != 1 || len(got) != 1 {
		t.Fatalf("not restored from cache: live=%d hook=%v", f.v.Len(), got)
	}
}

func TestProjectionRanking(t *testing.T) {
	f := newFixture(t)
	a, b, c := newAgent(t), newAgent(t), newAgent(t)
	f.v.Announce(a.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.2}), a.id.PeerID, "")
	f.v.Announce(b.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.9}), b.id.PeerID, "")
	f.v.Announce(c.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.95}), c.id.PeerID, "")
	// c reports DEGRADED: health beats confidence.
	f.v.Beat(KindStatus, c.beat(t, 2, record.StatusDegraded, ""), c.id.PeerID, "")
	got := f.v.Lookup("x")
	if len(got) != 3 {
		t.Fatalf("providers %d", len(got))
	}
	want := []string{b.id.AgentID, a.id.AgentID, c.id.AgentID}
	for i, p := range got {
		if p.AgentID != want[i] {
			t.Fatalf("rank %d: got %s (%s %.2f), want %s", i, p.AgentID, p.Status, p.Confidence, want[i])
		}
	}
	if caps := f.v.Capabilities(); len(caps) != 1 || len(caps["x"]) != 3 {
		t.Fatalf("capabilities %v", caps)
	}
}

func TestRequestScene(t *testing.T) {
	f := newFixture(t)
	a, b, c := newAgent(t), newAgent(t), newAgent(t)
	f.v.Announce(a.sign(t, 1, f.clk.Now(), []string{"auth"}, map[string]float64{"org-data-read": 0.4, "user-auth": 0.4}), a.id.PeerID, "")
	f.v.Announce(b.sign(t, 1, f.clk.Now(), []string{"auth"}, map[string]float64{"org-data-read": 0.9, "user-auth": 0.9}), b.id.PeerID, "")
	f.v.Announce(c.sign(t, 1, f.clk.Now(), []string{"auth"}, map[string]float64{"org-data-read": 1}), c.id.PeerID, "")
	j, err := f.v.RequestScene("auth", []string{"org-data-read", "user-auth"})
	if err != nil {
		t.Fatal(err)
	}
	if j.AgentID != b.id.AgentID || j.ConnectionInfo.Host != "10.0.0.1" || j.ConnectionInfo.Port != 8080 || j.SkillInfo.SkillID != "skill-x" {
		t.Fatalf("join %+v", j)
	}
	f.v.Beat(KindStatus, b.beat(t, 2, record.StatusMaintenance, ""), b.id.PeerID, "")
	if j, _ = f.v.RequestScene("auth", []string{"org-data-read", "user-auth"}); j.AgentID != a.id.AgentID {
		t.Fatalf("maintenance skill chosen: %+v", j)
	}
	if _, err := f.v.RequestScene("auth", []string{"nope"}); !errors.Is(err, ErrSceneNotFound) {
		t.Fatalf("err %v", err)
	}
	if _, err := f.v.RequestScene("billing", nil); !errors.Is(err, ErrSceneNotFound) {
		t.Fatalf("err %v", err)
	}
	if m := f.v.SceneMembers("auth"); len(m) != 3 {
		t.Fatalf("members %d", len(m))
	}
}

func TestSubscriptionFilters(t *testing.T) {
	f := newFixture(t)
	byCap := f.v.Subscribe(Filter{Capability: "order.status"}, 16)
	byPrefix := f.v.Subscribe(Filter{Prefix: "product."}, 16)
	beats := f.v.Subscribe(Filter{Types: []EventType{EventHeartbeat}}, 16)
	k := newAgent(t)
	f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"product.search": 0}), k.id.PeerID, "")
	if e := next(t, byPrefix); e.Type != EventRegistered {
		t.Fatalf("got %+v", e)
	}
	if e := next(t, byPrefix); e.Type != EventCapabilityChanged || e.Capability != "product.search" {
		t.Fatalf("got %+v", e)
	}
	expectNone(t, byCap)
	expectNone(t, beats)
	f.v.Beat(KindHeartbeat, k.beat(t, 2, "", ""), k.id.PeerID, "")
	if e := next(t, beats); e.Type != EventHeartbeat {
		t.Fatalf("got %+v", e)
	}
	expectNone(t, byPrefix)
}

func TestSubscriptionLagged(t *testing.T) {
	f := newFixture(t)
	sub := f.v.Subscribe(Filter{Heartbeats: true}, 2)
	k := newAgent(t)
	f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"c": 0}), k.id.PeerID, "")
	for i := uint64(2); i < 6; i++ {
		f.v.Beat(KindHeartbeat, k.beat(t, i, "", ""), k.id.PeerID, "")
	}
	n := 0
	for range sub.C() {
		n++
	}
	if n != 2 || !errors.Is(sub.Err(), ErrLagged) {
		t.Fatalf("received %d, err %v", n, sub.Err())
	}
}

func TestStartClose(t *testing.T) {
	f := newFixture(t)
	f.v.Start(context.Background())
	sub := f.v.Subscribe(Filter{}, 1)
	if err := f.v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.C(); ok || !errors.Is(sub.Err(), ErrViewClosed) {
		t.Fatal("subscription not closed with the view")
	}
	_ = f.v.Close()
}

func TestStretchedIntervalIsHonoured(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"c": 0}), k.id.PeerID, "")
	b := k.beat(t, 2, "", "")
	b2, err := record.SignBeat(record.Beat{AgentID: b.Beat.AgentID, PeerID: b.Beat.PeerID, Seq: 2, Timestamp: b.Beat.Timestamp, IntervalMS: 20000}, k.id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, b2, k.id.PeerID, "")
	// Three default intervals (15 s) are less than one stated interval.
	f.clk.Add(40 * time.Second)
	f.v.sweep()
	if a, ok := f.v.Get(k.id.AgentID); !ok || a.Status != record.StatusHealthy {
		t.Fatalf("agent with a 20 s interval judged by the 5 s default: %+v %v", a.Status, ok)
	}
	// Three stated intervals: UNHEALTHY; the timeout scales too (30 s × 4).
	f.clk.Add(21 * time.Second)
	f.v.sweep()
	if a, _ := f.v.Get(k.id.AgentID); a.Status != record.StatusUnhealthy {
		t.Fatalf("status %s after 3 stated intervals", a.Status)
	}
	f.clk.Add(60 * time.Second)
	f.v.sweep()
	if f.v.Len() != 0 {
		t.Fatal("not removed after the scaled timeout")
	}
}

// TestSyncedRecordKeepsItsAge: a record learnt by sync at join is as old
// as the neighbours' last news of the agent. An agent a neighbour last
// heard 25 s ago times out here 5 s later, not 30 s later (a joiner must
// not revive the dead); one past the timeout is cached, not listed; a
// sync never makes a fresher agent look older; LiveRecords reports ages.
func TestSyncedRecordKeepsItsAge(t *testing.T) {
	f := newFixture(t)
	old, dead, fresh := newAgent(t), newAgent(t), newAgent(t)
	caps := map[string]float64{"c": 0}
	if err := f.v.Synced(old.sign(t, 1, f.clk.Now(), nil, caps), 25*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.v.Synced(dead.sign(t, 1, f.clk.Now(), nil, caps), 31*time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.v.Get(dead.id.AgentID); ok {
		t.Fatal("an agent silent past the timeout was listed")
	}
	if e, err := f.st.Get(context.Background(), dead.id.AgentID); err != nil || !e.Stale {
		t.Fatalf("the record of an agent silent past the timeout should be cached, stale: %+v, %v", e, err)
	}
	fr := fresh.sign(t, 1, f.clk.Now(), nil, caps)
	f.v.Announce(fr, fresh.id.PeerID, "")
	f.clk.Add(2 * time.Second)
	// The same record from a neighbour that heard it 20 s ago: no older.
	_ = f.v.Synced(fr, 20*time.Second, 0)
	f.v.sweep()
	a, ok := f.v.Get(old.id.AgentID)
	if !ok || a.Status != record.StatusUnhealthy {
		t.Fatalf("agent heard 27 s ago: listed %v, status %s; want UNHEALTHY", ok, a.Status)
	}
	ages := map[string]time.Duration{}
	for _, lr := range f.v.LiveRecords(10, nil) {
		ages[lr.Record.Agent.AgentID] = lr.Age
	}
	if ages[old.id.AgentID] != 27*time.Second || ages[fresh.id.AgentID] != 2*time.Second || len(ages) != 2 {
		t.Fatalf("LiveRecords ages %v", ages)
	}
	f.clk.Add(3*time.Second + time.Millisecond)
	f.v.sweep()
	if _, ok := f.v.Get(old.id.AgentID); ok {
		t.Fatal("a synced agent outlived its timeout counted from the neighbour's last news")
	}
	if _, ok := f.v.Get(fresh.id.AgentID); !ok {
		t.Fatal("a fresh agent was dropped")
	}
}

// touchCounter counts the store writes beats cause.
type touchCounter struct {
	store.Store
	n int
}

func (c *touchCounter) Touch(ctx context.Context, id string, t time.Time) error {
	c.n++
	return c.Store.Touch(ctx, id, t)
}

// TestBeatsKeepTheCacheFreshWithFewWrites: ten minutes of heartbeats keep
// the agent's cached record fresh throughout, with a handful of store
// writes rather than one per beat; once the agent stops, the entry goes
// stale with its departure.
func TestBeatsKeepTheCacheFreshWithFewWrites(t *testing.T) {
	clk := &clock{t: time.Now()}
	st, err := store.Open(store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	tc := &touchCounter{Store: st}
	v := New(Config{Now: clk.Now}, tc, nil, nil, nil)
	defer func() { _ = v.Close() }()
	k := newAgent(t)
	v.Announce(k.sign(t, 1, clk.Now(), nil, map[string]float64{"c": 0}), k.id.PeerID, "")
	for i := range 120 {
		clk.Add(5 * time.Second)
		v.Beat(KindHeartbeat, k.beat(t, uint64(2+i), "", ""), k.id.PeerID, "")
		v.sweep()
		e, err := st.Get(context.Background(), k.id.AgentID)
		if err != nil || e.Stale {
			t.Fatalf("after %d beats: cached entry %+v, %v; want fresh", i+1, e, err)
		}
	}
	if tc.n > 8 {
		t.Errorf("%d store writes for 120 beats, want about one per 150 s", tc.n)
	}
	clk.Add(31 * time.Second)
	v.sweep()
	if e, err := st.Get(context.Background(), k.id.AgentID); err != nil || !e.Stale {
		t.Fatalf("after the timeout: %+v, %v; want a stale entry", e, err)
	}
}

// TestDropPeer: a peer confirmed unreachable leaves at once; a neighbour's
// copy of its record cannot bring it back, nor can a beat it signed before;
// a beat signed since (the peer lives: a split healed) restores it from the
// cache, and so does a connection (PeerUp).
func TestDropPeer(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"c": 0})
	if err := f.v.Learn(sa, store.SourceGossip, true); err != nil {
		t.Fatal(err)
	}
	sub := f.v.Subscribe(Filter{}, 16)
	defer sub.Close()
	f.clk.Add(time.Second)
	if n := f.v.DropPeer(k.id.PeerID, ReasonPeerDown); n != 1 || f.v.Len() != 0 {
		t.Fatalf("dropped %d, %d left", n, f.v.Len())
	}
	if e := next(t, sub); e.Type != EventDeregistered || e.Reason != ReasonPeerDown {
		t.Fatalf("event %+v", e)
	}
	if err := f.v.Synced(sa, 0, 0); trust.ReasonOf(err) != ReasonPeerIsDown || f.v.Len() != 0 {
		t.Fatalf("a neighbour's copy after the drop: %v, %d live", err, f.v.Len())
	}
	beatAt := func(seq uint64, at time.Time) *record.SignedBeat {
		sb, err := record.SignBeat(record.Beat{AgentID: k.id.AgentID, PeerID: k.id.PeerID.String(), Seq: seq, Timestamp: at.UnixMilli()}, k.id.AgentKey)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	f.v.Beat(KindHeartbeat, beatAt(11, f.clk.Now().Add(-2*time.Second)), k.id.PeerID, "")
	if f.v.Len() != 0 {
		t.Fatal("a beat signed before the drop restored the agent")
	}
	f.v.Beat(KindHeartbeat, beatAt(12, f.clk.Now().Add(time.Second)), k.id.PeerID, "")
	if _, ok := f.v.Get(k.id.AgentID); !ok {
		t.Fatal("a beat signed since the drop did not restore the agent")
	}
	// A connection is proof of life too.
	f.v.DropPeer(k.id.PeerID, ReasonPeerDown)
	f.v.PeerUp(k.id.PeerID)
	if err := f.v.Synced(sa, 0, 0); err != nil || f.v.Len() != 1 {
		t.Fatalf("after PeerUp: %v, %d live", err, f.v.Len())
	}
	// The mark lapses after twice the timeout.
	f.v.DropPeer(k.id.PeerID, ReasonPeerDown)
	f.clk.Add(61 * time.Second)
	if err := f.v.Synced(sa, 0, 0); err != nil {
		t.Fatalf("after the mark lapsed: %v", err)
	}
}

// TestDroppedAgentsAreForgotten: the agents DropPeer removed of a peer are
// handed back once by PeerUp, and forgotten whenever the peer proves alive
// otherwise (a beat signed since) or its mark lapses — never kept for a
// peer that is no longer marked down.
func TestDroppedAgentsAreForgotten(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"c": 0})
	learn := func() {
		t.Helper()
		if err := f.v.Learn(sa, store.SourceGossip, true); err != nil {
			t.Fatal(err)
		}
	}
	held := func() int {
		f.v.mu.Lock()
		defer f.v.mu.Unlock()
		return len(f.v.dropped)
	}
	learn()
	f.clk.Add(time.Second)
	f.v.DropPeer(k.id.PeerID, ReasonPeerDown)
	if got := f.v.PeerUp(k.id.PeerID); !slices.Equal(got, []string{k.id.AgentID}) {
		t.Fatalf("PeerUp returned %v, want the dropped agent", got)
	}
	if got := f.v.PeerUp(k.id.PeerID); len(got) != 0 || held() != 0 {
		t.Fatalf("PeerUp again returned %v (%d peers held)", got, held())
	}

	// A beat signed since the drop: alive, nothing held.
	learn()
	f.clk.Add(time.Second)
	f.v.DropPeer(k.id.PeerID, ReasonPeerDown)
	sb, err := record.SignBeat(record.Beat{AgentID: k.id.AgentID, PeerID: k.id.PeerID.String(), Seq: 11, Timestamp: f.clk.Now().Add(time.Second).UnixMilli()}, k.id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, sb, k.id.PeerID, "")
	if held() != 0 {
		t.Fatal("the dropped agents were kept for a peer that beat since")
	}

	// The mark lapses: nothing held.
	f.clk.Add(time.Second)
	f.v.DropPeer(k.id.PeerID, ReasonPeerDown)
	f.clk.Add(61 * time.Second)
	f.v.sweep()
	if held() != 0 {
		t.Fatal("the dropped agents were kept after the mark lapsed")
	}
}

// The sweep walks remote agents only and counts hosted ones from
// localByStatus: the live-agents gauge must match a walk of every agent
// through registrations, status changes, a remote agent becoming hosted,
// time-outs and removals.
func TestLiveCountsWithoutWalkingHostedAgents(t *testing.T) {
	clk := &clock{t: time.Now()}
	st, err := store.Open(store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m := metrics.New(false)
	v := New(Config{Now: clk.Now}, st, nil, m, nil)
	t.Cleanup(func() { _ = v.Close() })
	gauge := func(s record.Status) int {
		var d dto.Metric
		if err := m.LiveAgents.WithLabelValues(string(s)).Write(&d); err != nil {
			t.Fatal(err)
		}
		return int(d.GetGauge().GetValue())
	}
	check := func(what string) {
		t.Helper()
		v.sweep()
		var want [5]int
		v.mu.Lock()
		remote := 0
		for _, s := range v.agents {
			want[v.effective(s).Rank()]++
			if !s.local {
				remote++
			}
		}
		if remote != len(v.remote) {
			t.Fatalf("%s: %d remote agents, the remote set holds %d", what, remote, len(v.remote))
		}
		v.mu.Unlock()
		for _, s := range []record.Status{record.StatusHealthy, record.StatusDegraded, record.StatusUnhealthy, record.StatusMaintenance} {
			if got := gauge(s); got != want[s.Rank()] {
				t.Fatalf("%s: %s gauge %d, a walk counts %d", what, s, got, want[s.Rank()])
			}
		}
	}
	var hosted []*agentKeys
	for range 3 {
		k := newAgent(t)
		hosted = append(hosted, k)
		v.ApplyLocal(k.sign(t, 1, clk.Now(), nil, map[string]float64{"cap.h": 0.5}))
	}
	check("three hosted")
	v.SetLocalStatus(hosted[0].id.AgentID, record.StatusDegraded)
	v.SetLocalStatus(hosted[1].id.AgentID, record.StatusMaintenance)
	check("hosted statuses")
	r1, r2 := newAgent(t), newAgent(t)
	for _, k := range []*agentKeys{r1, r2} {
		sa := k.sign(t, 1, clk.Now(), nil, map[string]float64{"cap.r": 0.5})
		if err := v.CheckAnnounce(sa); err != nil {
			t.Fatal(err)
		}
		v.Announce(sa, k.id.PeerID, "")
	}
	v.SetStatus(r1.id.AgentID, record.StatusDegraded)
	check("two remote")
	v.ApplyLocal(r2.sign(t, 2, clk.Now(), nil, map[string]float64{"cap.r": 0.5})) // now hosted here
	check("a remote agent hosted")
	clk.Add(20 * time.Second)
	check("remote unhealthy")
	clk.Add(20 * time.Second)
	check("remote timed out")
	if _, ok := v.Get(r1.id.AgentID); ok {
		t.Fatal("the silent remote agent did not time out")
	}
	if _, ok := v.Get(hosted[2].id.AgentID); !ok {
		t.Fatal("a hosted agent timed out")
	}
	v.RemoveLocal(hosted[0].id.AgentID, record.ReasonShutdown)
	check("a hosted agent removed")
}

// TestReplayedBeatDoesNotReviveADepartedAgent: an agent that timed out is
// not brought back by a beat it sent before it went silent. pubsub forgets
// a message id after its seen-TTL (30 s), so anyone who kept the original
// signed message can send it again after the timeout; without a memory of
// the departed agent's last seq, the view restored the cached record and
// kept a dead agent alive for as long as the replays went on. A newer beat
// (the agent back) still restores it.
func TestReplayedBeatDoesNotReviveADepartedAgent(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"cap.a": 0.5})
	f.v.Announce(sa, k.id.PeerID, "")
	last := k.beat(t, 11, "", "")
	f.v.Beat(KindHeartbeat, last, k.id.PeerID, "")
	for range 7 {
		f.clk.Add(5 * time.Second)
		f.v.sweep()
	}
	if f.v.Len() != 0 {
		t.Fatal("the silent agent did not time out")
	}
	for _, sb := range []*record.SignedBeat{last, k.beat(t, 10, "", "")} {
		if err := f.v.CheckBeat(KindHeartbeat, sb); trust.ReasonOf(err) != trust.ReasonReplay {
			t.Fatalf("beat seq %d of the departed agent: %v, want replay", sb.Beat.Seq, err)
		}
		f.v.Beat(KindHeartbeat, sb, k.id.PeerID, "") // delivery re-checks
		if _, ok := f.v.Get(k.id.AgentID); ok {
			t.Fatalf("a replayed beat (seq %d) revived the departed agent", sb.Beat.Seq)
		}
	}
	if err := f.v.CheckAnnounce(sa); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("the departed agent's record again: %v, want replay", err)
	}
	back := k.beat(t, 12, "", "")
	if err := f.v.CheckBeat(KindHeartbeat, back); err != nil {
		t.Fatalf("a new beat of the agent: %v", err)
	}
	f.v.Beat(KindHeartbeat, back, k.id.PeerID, "")
	if a, ok := f.v.Get(k.id.AgentID); !ok || a.Status != record.StatusHealthy {
		t.Fatalf("the agent back: %+v %v", a, ok)
	}
}

func TestDepartedSeqsAreBounded(t *testing.T) {
	var d departedSeqs
	now := time.Now()
	for i := range maxDeparted + 10 {
		d.add(fmt.Sprint(i), uint64(i), now.Add(time.Hour))
	}
	if len(d.m) != maxDeparted {
		t.Fatalf("%d departures held, bound %d", len(d.m), maxDeparted)
	}
	if _, ok := d.seq("0", now); ok {
		t.Fatal("the oldest departure was kept past the bound")
	}
	if seq, ok := d.seq(fmt.Sprint(maxDeparted+9), now); !ok || seq != maxDeparted+9 {
		t.Fatalf("the newest departure: %d %v", seq, ok)
	}
	if _, ok := d.seq("20", now.Add(2*time.Hour)); ok {
		t.Fatal("a departure is remembered after its record expired")
	}
	for i := range maxDeparted {
		d.take(fmt.Sprint(i + 10))
	}
	d.prune(now)
	if len(d.m) != 0 || len(d.order) != 0 {
		t.Fatalf("after taking every departure: %d held, %d in order", len(d.m), len(d.order))
	}
	d.add("x", 1, now.Add(time.Minute))
	d.prune(now.Add(2 * time.Minute))
	if len(d.m) != 0 {
		t.Fatal("an expired departure survived prune")
	}
}

// TestLateCallsOncePerIntervalOfSilence: Config.Late names an agent's
// peer after LateAfter silent intervals, again after each further one, and
// starts over after a beat; a beating agent is never named.
func TestLateCallsOncePerIntervalOfSilence(t *testing.T) {
	clk := &clock{t: time.Now()}
	st, err := store.Open(store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var mu sync.Mutex
	var calls []string
	late := func(peerID string, ids []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			calls = append(calls, peerID+"/"+id)
		}
	}
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		c := calls
		calls = nil
		return c
	}
	v := New(Config{Now: clk.Now, Late: late}, st, nil, nil, nil)
	t.Cleanup(func() { _ = v.Close() })
	quiet, beating := newAgent(t), newAgent(t)
	for _, k := range []*agentKeys{quiet, beating} {
		sa := k.sign(t, 10, clk.Now(), nil, map[string]float64{"cap.a": 0.5})
		if err := v.CheckAnnounce(sa); err != nil {
			t.Fatal(err)
		}
		v.Announce(sa, k.id.PeerID, "")
	}
	want := quiet.id.PeerID.String() + "/" + quiet.id.AgentID
	seq := uint64(10)
	step := func(d time.Duration) []string {
		clk.Add(d)
		seq++
		v.Beat(KindHeartbeat, beating.beat(t, seq, "", ""), beating.id.PeerID, "")
		v.sweep()
		return taken()
	}
	// 9.9 s of silence: not late yet.
	if got := step(9900 * time.Millisecond); len(got) != 0 {
		t.Fatalf("late after 9.9 s: %v", got)
	}
	// Two intervals: named once, and not again within the interval.
	if got := step(200 * time.Millisecond); len(got) != 1 || got[0] != want {
		t.Fatalf("after 10.1 s: %v, want [%s]", got, want)
	}
	if got := step(4 * time.Second); len(got) != 0 {
		t.Fatalf("named again within the interval: %v", got)
	}
	// Three and four intervals: named again each time.
	for _, d := range []time.Duration{time.Second, 5 * time.Second} {
		if got := step(d); len(got) != 1 || got[0] != want {
			t.Fatalf("after %v more: %v, want [%s]", d, got, want)
		}
	}
	// A beat starts the count over.
	v.Beat(KindHeartbeat, quiet.beat(t, 50, "", ""), quiet.id.PeerID, "")
	if got := step(5 * time.Second); len(got) != 0 {
		t.Fatalf("named 5 s after a beat: %v", got)
	}
	if got := step(5100 * time.Millisecond); len(got) != 1 {
		t.Fatalf("not named 10.1 s after the beat: %v", got)
	}
	// Past the timeout it is removed, not named.
	if got := step(25 * time.Second); len(got) != 0 {
		t.Fatalf("named at the timeout: %v", got)
	}
	if _, ok := v.Get(quiet.id.AgentID); ok {
		t.Fatal("the silent agent is still live")
	}
}

// TestHolds: the view holds a record exactly — same agent, seq, bytes and
// signatures — only as a remote agent's current record.
func TestHolds(t *testing.T) {
	f := newFixture(t)
	k := newAgent(t)
	sa := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"cap.a": 0})
	if f.v.Holds(sa) {
		t.Fatal("an empty view holds a record")
	}
	f.v.Announce(sa, k.id.PeerID, "")
	if !f.v.Holds(sa) {
		t.Fatal("the view does not hold the record it was given")
	}
	if !f.v.Holds(sa.Clone()) {
		t.Fatal("the view does not hold a copy of the record it was given")
	}
	// The same seq signed again (another issued_at: other bytes).
	f.clk.Add(time.Second)
	other := k.sign(t, 10, f.clk.Now(), nil, map[string]float64{"cap.a": 0})
	if f.v.Holds(other) {
		t.Fatal("the view holds other bytes at the same seq")
	}
	// The same bytes with another signature.
	forged := sa.Clone()
	forged.Signature = slices.Clone(forged.Signature)
	forged.Signature[len(forged.Signature)-1] ^= 1
	if f.v.Holds(forged) {
		t.Fatal("the view holds the record under another signature")
	}
	newer := k.sign(t, 11, f.clk.Now(), nil, map[string]float64{"cap.a": 0})
	f.v.Announce(newer, k.id.PeerID, "")
	if f.v.Holds(sa) || !f.v.Holds(newer) {
		t.Fatal("the view holds a record it replaced, or not its replacement")
	}
	// A hosted agent's record is not held as a remote one.
	l := newAgent(t)
	local := l.sign(t, 5, f.clk.Now(), nil, map[string]float64{"c": 0})
	f.v.ApplyLocal(local)
	if f.v.Holds(local) {
		t.Fatal("the view holds a hosted record as a remote one")
	}
}
