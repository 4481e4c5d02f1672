package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func registerMany(t *testing.T, nd *tnode, n int) []*record.SignedAgent {
	t.Helper()
	var out []*record.SignedAgent
	for range n {
		a := spec("skill-p", "cap.p")
		a.AgentID = uuid.NewString()
		sa, err := nd.Register(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sa)
	}
	return out
}

// heartbeatsSent counts the heartbeats a node published: alone or inside
// heartbeat batches.
func heartbeatsSent(nd *tnode) float64 {
	return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues(kindHeartbeat)) + promtest.ToFloat64(nd.m.BatchedBeats)
}

// sendTimes waits until n more heartbeats than now have left nd (alone or
// in batches), failing after deadline, and returns when it began and when
// each of them was seen to leave (polled every testutil.DefaultPoll of
// virtual time).
func sendTimes(t *testing.T, nd *tnode, n int, deadline time.Duration) (start time.Time, at []time.Time) {
	t.Helper()
	start, last := time.Now(), heartbeatsSent(nd)
	target := last + float64(n)
	waitFor(t, deadline, fmt.Sprintf("%d heartbeats", n), func() bool {
		cur := heartbeatsSent(nd)
		for ; last < cur; last++ {
			at = append(at, time.Now())
		}
		return cur >= target
	})
	return start, at
}

// TestHeartbeatsArePaced: a node's heartbeats are spread over the
// interval, not sent in one burst per interval (virtual time: 40 agents,
// a 10 s interval, so 4 a second, which leave as one heartbeat batch a
// second); the listener holds every agent alive on them alone; and a node
// nobody listens to sends none.
func TestHeartbeatsArePaced(t *testing.T) {
	bubble(t, func(t *testing.T) {
		// Every heartbeat on gossip: the pacing is what is measured.
		tn := newNet(t, 2, Config{HeartbeatInterval: 10 * time.Second, GossipBeatEvery: 1})
		listener, nd := tn.nodes[0], tn.nodes[1]
		hosted := registerMany(t, nd, 40)
		waitFor(t, 5*time.Second, "a listener", func() bool { return nd.gsp.Listened(record.Shard("cap.p")) })
		// The windows are counted once the heartbeat loop's rounds hold
		// all 40 agents: once every one of them has beaten (the listener
		// heard it a second after its announcement). The round that was under way
		// while they registered held some of them only, at a wider step,
		// and how many depends on when the loop first ran, which the test
		// does not order: counting from the first heartbeat batch, the
		// first windows had 6 and 12 heartbeats now and then.
		t0 := time.Now().Add(time.Second)
		waitFor(t, 25*time.Second, "a heartbeat of every hosted agent", func() bool {
			for _, sa := range hosted {
				if a, ok := live(listener.Node, sa.Agent.AgentID); !ok || !a.LastHeard.After(t0) {
					return false
				}
			}
			return true
		})
		beats := func() float64 { return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues("beats")) }
		batches0 := beats()
		start, sent := sendTimes(t, nd, 280, 90*time.Second)
		windows := make([]float64, 12)
		total := 0.0
		for _, at := range sent {
			if k := int(at.Sub(start) / (5 * time.Second)); k < len(windows) {
				windows[k]++
				total++
			}
		}
		if slices.Min(windows) < 15 || slices.Max(windows) > 25 || total < 220 || total > 260 {
			t.Fatalf("heartbeats per 5 s over 60 s: %v (total %v), want about 20 in every window", windows, total)
		}
		elapsed := time.Since(start)
		batches := (beats() - batches0) * float64(time.Minute) / float64(elapsed)
		// A batch leaves a second after its first heartbeat with the
		// heartbeats whose slots fall within a tick of then: in virtual
		// time, where the loop wakes exactly on its slots, that is 4 every
		// second or 6 every 1.5 s depending on the round's phase.
		if batches < 35 || batches > 80 {
			t.Fatalf("%.0f heartbeat batches a minute, want about one a second (%v batches in %v)", batches, beats()-batches0, elapsed)
		}
		// 70 s is over twice the liveness timeout: the batches alone kept every
		// hosted agent alive at the listener.
		for _, sa := range hosted {
			if a, ok := live(listener.Node, sa.Agent.AgentID); !ok || a.Status != record.StatusHealthy {
				t.Fatalf("agent %s at the listener: %+v (present %v), want HEALTHY", sa.Agent.AgentID, a, ok)
			}
		}
		alone := newNet(t, 1, Config{HeartbeatInterval: 10 * time.Second}).nodes[0]
		registerMany(t, alone, 5)
		time.Sleep(30 * time.Second)
		if n := heartbeatsSent(alone); n != 0 {
			t.Fatalf("a node without listeners published %v heartbeats", n)
		}
	})
}

// TestBatchesOnlyToPeersThatReadThem: a listener of the previous protocol
// version (modelled by a node that does not list gossip.BatchProtocol)
// gets every heartbeat alone, signed, and keeps the agents alive; once it
// is gone the host batches again.
func TestBatchesOnlyToPeersThatReadThem(t *testing.T) {
	bubble(t, func(t *testing.T) {
		gc := gossip.DefaultConfig()
		gc.DisableBatches = true
		old := newNet(t, 1, Config{HeartbeatInterval: 10 * time.Second, Gossip: &gc})
		tn := old
		tn.cfg.Gossip = nil
		nd := tn.add(nil, nil)
		hosted := registerMany(t, nd, 40)
		waitFor(t, 5*time.Second, "a listener", func() bool { return nd.gsp.Listened(record.Shard("cap.p")) })
		singles := func() float64 { return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues(kindHeartbeat)) }
		took := waitFor(t, 50*time.Second, "120 single heartbeats", func() bool { return singles() >= 120 })
		if n := promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues("beats")); n != 0 {
			t.Fatalf("%v heartbeat batches sent to a peer that does not read them", n)
		}
		// 4 a second once the first interval (10 s) is over.
		if took < 37*time.Second || took > 43*time.Second {
			t.Fatalf("120 single heartbeats took %s, want about 40 s (4 a second after the first interval)", took)
		}
		for _, sa := range hosted {
			if a, ok := live(tn.nodes[0].Node, sa.Agent.AgentID); !ok || a.Status != record.StatusHealthy {
				t.Fatalf("agent %s at the old listener: %+v (present %v), want HEALTHY", sa.Agent.AgentID, a, ok)
			}
		}
		// A listener of protocol v1.2 joins (it pulls, and does not ask
		// for heartbeats on gossip: the host keeps one in three there)
		// and the old one leaves.
		tn.addConfigured(func(c *Config) { c.DisableBeatRequests = true })
		if err := tn.nodes[0].Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "heartbeat batches after the old listener left", func() bool {
			return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues("beats")) >= 5
		})
	})
}

// TestRestartResignsInTheBackground: after a restart the stored records are
// served at once and signed again in their heartbeat slots; a
// registration made meanwhile is not overwritten by the background
// re-signing of the record it replaced.
func TestRestartResignsInTheBackground(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 2, Config{HeartbeatInterval: 10 * time.Second})
		nd := tn.nodes[1]
		sas := registerMany(t, nd, 20)
		if err := nd.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		re := tn.add(nd.id, nd.st)
		if got := re.Health(); got.Hosted != 20 || got.Resigning < 19 {
			t.Fatalf("after restart: %d hosted, %d resigning; want 20 hosted, all but the first slot waiting", got.Hosted, got.Resigning)
		}
		for _, sa := range sas {
			if _, ok := re.hostedRecord(sa.Agent.AgentID); !ok {
				t.Fatalf("agent %s not served after restart", sa.Agent.AgentID)
			}
		}
		// The DHT has every stored record soon after the start, not each
		// in its re-signing slot.
		waitFor(t, time.Second, "restored records in the DHT", func() bool { return re.dht.Status().PublishedValues >= 20 })
		// Replace the last agent (the last slot) before its slot comes.
		last := sas[len(sas)-1]
		for _, sa := range sas {
			if sa.Agent.AgentID > last.Agent.AgentID {
				last = sa
			}
		}
		a := spec("skill-p", "cap.p", "cap.new")
		a.AgentID = last.Agent.AgentID
		if _, err := re.Register(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "every record re-signed", func() bool { return re.Resigning() == 0 })
		for _, sa := range sas {
			cur, ok := re.hostedRecord(sa.Agent.AgentID)
			if !ok || cur.Agent.Seq <= sa.Agent.Seq {
				t.Fatalf("agent %s not re-signed: %v", sa.Agent.AgentID, ok)
			}
		}
		cur, _ := re.hostedRecord(last.Agent.AgentID)
		if !slices.Contains(cur.Agent.AllCapabilities(), "cap.new") {
			t.Fatalf("the background re-signing wrote back the replaced record: %v", cur.Agent.AllCapabilities())
		}
	})
}

// TestShutdownUnregistersWhatIsHeard: a shutdown unregisters the agents a
// peer listens for, none when nobody listens, and stops when its context
// ends (a node hosting many thousands cannot say them all in time).
func TestShutdownUnregistersWhatIsHeard(t *testing.T) {
	bubble(t, func(t *testing.T) {
		unregs := func(nd *tnode) float64 {
			return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues(kindUnregister))
		}
		alone := newNet(t, 1, Config{}).nodes[0]
		registerMany(t, alone, 5)
		if err := alone.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := unregs(alone); n != 0 {
			t.Fatalf("a node nobody listens to published %v unregisters", n)
		}

		tn := newNet(t, 2, Config{})
		nd := tn.nodes[1]
		registerMany(t, nd, 5)
		waitFor(t, 5*time.Second, "a listener", func() bool { return nd.gsp.Listened(record.Shard("cap.p")) })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := nd.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if n := unregs(nd); n != 0 {
			t.Fatalf("a shutdown out of time published %v unregisters", n)
		}

		other := newNet(t, 2, Config{}).nodes[1]
		registerMany(t, other, 5)
		waitFor(t, 5*time.Second, "a listener", func() bool { return other.gsp.Listened(record.Shard("cap.p")) })
		if err := other.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := unregs(other); n < 5 {
			t.Fatalf("%v unregisters published for 5 agents heard", n)
		}
	})
}

// TestBatchFromAnotherPeerIsRefused: a peer that lies — it sends heartbeat
// batches naming agents another node hosts, under its own (valid) pubsub
// signature — keeps none of them alive: a batch speaks only for the
// agents whose records name its author. The host crashes, the liar goes
// on, and the agents leave the third node's view on the seed's clock.
func TestBatchFromAnotherPeerIsRefused(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{HeartbeatInterval: 5 * time.Second})
		liar, host, observer := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		hosted := registerMany(t, host, 3)
		for _, sa := range hosted {
			waitFor(t, 10*time.Second, "the observer hears the agents", func() bool { _, ok := live(observer.Node, sa.Agent.AgentID); return ok })
		}
		if err := host.Close(); err != nil {
			t.Fatal(err)
		}
		lies := func() []gossip.Heartbeat {
			var hbs []gossip.Heartbeat
			for _, sa := range hosted {
				b := record.Beat{AgentID: sa.Agent.AgentID, PeerID: liar.id.PeerID.String(), Seq: uint64(time.Now().UnixMilli()) + 1000,
					Status: record.StatusHealthy, Timestamp: time.Now().UnixMilli(), IntervalMS: 5000}
				hbs = append(hbs, gossip.Heartbeat{Beat: b, Shards: sa.Agent.Shards()})
			}
			return hbs
		}
		mismatches := func() float64 {
			return promtest.ToFloat64(observer.m.Rejects.WithLabelValues("gossip", string(trust.ReasonPeerMismatch)))
		}
		gone := func() bool {
			for _, sa := range hosted {
				if _, ok := live(observer.Node, sa.Agent.AgentID); ok {
					return false
				}
			}
			return true
		}
		// The liar sends a batch, waits until the observer has judged it,
		// and sends the next, until the crashed host's agents have left
		// the observer's view (the seed's 30 s) and 50 batches more.
		signed, told, goneAfter := 0, 0, -1
		for ; goneAfter < 0 || told < goneAfter+50; told++ {
			err := liar.Gossip().PublishHeartbeats(context.Background(), lies(), func(b record.Beat) (*record.SignedBeat, error) {
				signed++
				return record.SignBeatPeer(b, liar.id.PeerKey)
			})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the observer refusing the lie (peer_mismatch)", func() bool { return mismatches() >= float64(told+1) })
			if goneAfter < 0 && gone() {
				goneAfter = told + 1
			}
			if told > 10000 {
				t.Fatal("the crashed host's agents are still in the observer's view after 10 000 of a liar's batches")
			}
		}
		if signed != 0 {
			t.Fatalf("the liar's heartbeats left alone (%d), not in batches: the test proves nothing", signed)
		}
		if !gone() {
			t.Fatal("a crashed host's agent came back in the observer's view on a liar's batches")
		}
		if n := promtest.ToFloat64(liar.m.GossipPublished.WithLabelValues("beats")); n < float64(told) {
			t.Fatalf("the liar published %v batches, want %d", n, told)
		}
	})
}

// TestHostedShardsFollowRegistrations: the hosted part of the interest
// (wantShards) is kept per shard as agents register, change capabilities
// and unregister, and after a restart, without walking every hosted
// record.
func TestHostedShardsFollowRegistrations(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 1, Config{})
		nd := tn.nodes[0]
		want := func(caps ...string) {
			t.Helper()
			exp := map[string]bool{}
			for _, c := range caps {
				exp[record.Shard(c)] = true
			}
			if got := nd.wantShards(time.Now()); !maps.Equal(got, exp) {
				t.Fatalf("hosted shards %v, want those of %v", slices.Sorted(maps.Keys(got)), caps)
			}
		}
		a := spec("skill-a", "cap.a", "cap.b")
		a.AgentID = uuid.NewString()
		if _, err := nd.Register(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		b := spec("skill-b", "cap.b")
		b.AgentID = uuid.NewString()
		if _, err := nd.Register(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		want("cap.a", "cap.b")
		a2 := spec("skill-a", "cap.c") // a's update drops cap.a and cap.b
		a2.AgentID = a.AgentID
		if _, err := nd.Register(context.Background(), a2); err != nil {
			t.Fatal(err)
		}
		want("cap.b", "cap.c")
		if err := nd.Unregister(context.Background(), b.AgentID, record.ReasonShutdown); err != nil {
			t.Fatal(err)
		}
		want("cap.c")
		if err := nd.Close(); err != nil {
			t.Fatal(err)
		}
		re := tn.add(nd.id, nd.st)
		// A start counts the restored records' shards in the background.
		waitFor(t, 5*time.Second, "the restored registration's shards", func() bool {
			got := re.wantShards(time.Now())
			return len(got) == 1 && got[record.Shard("cap.c")]
		})
	})
}

// TestResignedWithAQuarterOfItsTTLLeft: a hosted record is signed again
// in the first heartbeat slot once a quarter of its TTL or less is left,
// not earlier (virtual time: a 2 min TTL, a 10 s interval).
func TestResignedWithAQuarterOfItsTTLLeft(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const ttl, interval = 2 * time.Minute, 10 * time.Second
		tn := newNet(t, 2, Config{HeartbeatInterval: interval, RecordTTL: ttl})
		nd := tn.nodes[1]
		first := registerMany(t, nd, 1)[0]
		id := first.Agent.AgentID
		var next *record.SignedAgent
		waitFor(t, ttl, "the record signed again", func() bool {
			cur, ok := nd.hostedRecord(id)
			if ok && cur.Agent.Seq > first.Agent.Seq {
				next = cur
			}
			return next != nil
		})
		after := next.Agent.Issued().Sub(first.Agent.Issued())
		if after < ttl-ttl/4 || after > ttl-ttl/4+interval+time.Second {
			t.Fatalf("re-signed %v after it was issued, want within one interval (%v) of %v", after, interval, ttl-ttl/4)
		}
	})
}

func TestDueForResign(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at       time.Duration // since issued
		ttl      time.Duration
		interval time.Duration
		want     bool
	}{
		{30 * time.Minute, time.Hour, 100 * time.Second, false},  // half its TTL left
		{44 * time.Minute, time.Hour, 100 * time.Second, false},  // 16 min left
		{45 * time.Minute, time.Hour, 100 * time.Second, true},   // a quarter left
		{59 * time.Minute, time.Hour, 100 * time.Second, true},   // about to expire
		{2 * time.Hour, time.Hour, 100 * time.Second, true},      // expired (a restart)
		{30 * time.Minute, time.Hour, 20 * time.Minute, false},   // the next slot, at 50 min, is past 45 min and before 52.5
		{40 * time.Minute, time.Hour, 20 * time.Minute, true},    // the next slot, at 60 min, would be too late
		{35 * time.Minute, time.Hour, 1000 * time.Second, false}, // 100 000 hosted: the next slot is at 51.7 min
		{36 * time.Minute, time.Hour, 1000 * time.Second, true},  // the next, at 52.7 min, would leave less than an eighth
		{2 * time.Minute, time.Hour, 2 * time.Hour, true},        // an interval longer than the TTL
		{10 * time.Second, 40 * time.Second, time.Second, false}, // short TTLs scale
		{30 * time.Second, 40 * time.Second, time.Second, true},
	} {
		if got := dueForResign(t0.Add(c.at), t0, c.ttl, c.interval); got != c.want {
			t.Errorf("%v after issue, TTL %v, interval %v: due %v, want %v", c.at, c.ttl, c.interval, got, c.want)
		}
	}
	// Whatever the interval (up to a third of the TTL) and wherever its
	// slots fall, the first slot found due leaves an eighth of the TTL or
	// more, and comes no earlier than one interval before three quarters.
	const ttl = time.Hour
	for _, interval := range []time.Duration{time.Second, 100 * time.Second, 7 * time.Minute, 1000 * time.Second, 20 * time.Minute} {
		for k := range 8 {
			slot := time.Duration(k) * interval / 8
			for !dueForResign(t0.Add(slot), t0, ttl, interval) {
				slot += interval
			}
			if left := ttl - slot; left < ttl/8 || slot < ttl-ttl/4-interval-batchTick {
				t.Errorf("interval %v, first slot %v: signed again at %v, %v before expiry", interval, time.Duration(k)*interval/8, slot, left)
			}
		}
	}
}

// TestRegistryAgentsKeepTheirInterval: a node that holds only some of a
// registry's agents (the per-peer quota here) budgets a shorter heartbeat
// interval than the registry, whose beats claim the interval its own
// budget gives. From the moment it learns them, the listener judges them
// by that interval — the announced ones before their own first beat by
// what their peer's other agents claim, the fetched ones by what the beat
// that made it fetch them claimed — so none goes UNHEALTHY between beats.
// Bounded by the listener's own interval, they went UNHEALTHY after three
// of its intervals, left, and were fetched again at their next beat, over
// and over (virtual time).
func TestRegistryAgentsKeepTheirInterval(t *testing.T) {
	bubble(t, func(t *testing.T) {
		// 60 agents, quota 20: the registry gossips 20 (the rest are
		// quiet) at 0.2 heartbeats a second, each every 100 s. The
		// listener's budget is 0.4 a second: it holds the 20 and beats
		// at 50 s.
		const quota = 20
		tn := newNet(t, 1, Config{HeartbeatMaxRate: 0.2, MaxAgentsPerPeer: quota})
		reg := tn.nodes[0]
		registerMany(t, reg, 60)
		if got := reg.heartbeatInterval(); got != 100*time.Second {
			t.Fatalf("registry interval %v, want 100s", got)
		}
		tn.cfg.HeartbeatMaxRate = 0.4
		lis := tn.add(nil, nil)
		// healthy counts the registry's agents the listener holds HEALTHY.
		healthy := func() int { return len(lis.View().ByPeer(reg.Host().ID())) }
		held := func() int { return lis.View().CountByPeer(reg.Host().ID()) }
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for s := 1; s <= 400; s++ {
			<-tick.C
			if h, n := healthy(), held(); h != n {
				t.Fatalf("%d s after the listener joined, %d of the %d agents of the registry it holds are HEALTHY", s, h, n)
			}
		}
		if n := held(); n != quota {
			t.Fatalf("the listener holds %d of the registry's agents, want %d", n, quota)
		}
		for _, sa := range lis.View().ByPeer(reg.Host().ID()) {
			if a, _ := lis.View().Get(sa.Agent.AgentID); a.Interval != 100*time.Second {
				t.Fatalf("agent %s judged by %v, want the registry's 100s", sa.Agent.AgentID, a.Interval)
			}
		}
		if got := lis.heartbeatInterval(); got != 50*time.Second {
			t.Fatalf("listener interval %v, want 50s", got)
		}
		if n := promtest.ToFloat64(lis.m.Rejects.WithLabelValues("view", "interval_clamped")); n != 0 {
			t.Fatalf("%v claimed intervals clamped", n)
		}
	})
}

// TestRegistryBeyondTheQuotaIsNotPenalised: a node hosting more agents
// than a peer admits of one peer gossips that many only; the others are
// quiet, kept signed and served through the DHT. Before, every peer
// refused the rest when they were announced — from their author, a
// flooder's penalty — and graylisted the registry at once (a quota of 4
// and the 16 records re-announced to a topic's first peer) and again at
// every re-signing round.
func TestRegistryBeyondTheQuotaIsNotPenalised(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const quota = 4
		ttl := 8 * time.Minute
		tn := newNet(t, 1, Config{MaxAgentsPerPeer: quota, RecordTTL: ttl})
		reg := tn.nodes[0]
		recs := registerMany(t, reg, 40)
		if h := reg.Health(); h.Quiet != 40-quota {
			t.Fatalf("%d quiet of %d hosted, want %d", h.Quiet, h.Hosted, 40-quota)
		}
		lis := tn.add(nil, nil)
		refused := func() float64 { return promtest.ToFloat64(lis.m.Rejects.WithLabelValues("gossip", "peer_quota")) }
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		// Through a re-signing round: every record is signed again after
		// three quarters of its TTL.
		for s := 1; s <= int(ttl/time.Second); s++ {
			<-tick.C
			if sc, ok := lis.Gossip().PeerScores()[reg.Host().ID()]; ok && sc < 0 {
				t.Fatalf("%d s after the listener joined, it scores the registry %v (%v quota refusals)", s, sc, refused())
			}
		}
		if n := refused(); n != 0 {
			t.Fatalf("the listener refused %v of the registry's records over the quota", n)
		}
		if n := lis.View().CountByPeer(reg.Host().ID()); n != quota {
			t.Fatalf("the listener holds %d of the registry's agents, want %d", n, quota)
		}
		// Quiet records were signed again (the store and the DHT have the
		// new seq), and a lookup by id finds one through the DHT.
		var quiet *record.SignedAgent
		for _, sa := range recs {
			if reg.View().Quiet(sa.Agent.AgentID) {
				quiet = sa
				break
			}
		}
		if ex, err := reg.Explain(context.Background(), ExplainQuery{Filter: store.Filter{AgentID: quiet.Agent.AgentID}, LocalOnly: true}); err != nil ||
			ex.Live == nil || !ex.Live.Quiet || !strings.Contains(ex.Summary, "quiet") {
			t.Fatalf("explain of a quiet agent: %+v, %v", ex, err)
		}
		cur, ok := reg.hostedRecord(quiet.Agent.AgentID)
		if !ok || cur.Agent.Seq <= quiet.Agent.Seq {
			t.Fatalf("quiet agent %s not signed again: seq %d, registered at %d", quiet.Agent.AgentID, cur.Agent.Seq, quiet.Agent.Seq)
		}
		r, err := lis.GetAgent(context.Background(), quiet.Agent.AgentID, true)
		if err != nil || r.Agent.Seq != cur.Agent.Seq {
			t.Fatalf("quiet agent looked up: %+v, %v; want seq %d", r, err, cur.Agent.Seq)
		}
		// A gossiped agent leaves: a quiet one takes its place, announced
		// with a new seq (its peers have never heard of it), and the
		// listener holds it.
		var gone string
		before := map[string]uint64{}
		for _, a := range lis.View().ByPeer(reg.Host().ID()) {
			gone = a.Agent.AgentID
			before[a.Agent.AgentID] = a.Agent.Seq
		}
		seqs := map[string]uint64{}
		for _, sa := range reg.Locals() {
			seqs[sa.Agent.AgentID] = sa.Agent.Seq
		}
		if err := reg.Unregister(context.Background(), gone, record.ReasonShutdown); err != nil {
			t.Fatal(err)
		}
		if h := reg.Health(); h.Quiet != 40-quota-1 {
			t.Fatalf("%d quiet after an unregistration, want %d", h.Quiet, 40-quota-1)
		}
		testutil.Eventually(t, time.Minute, "the listener holds the promoted agent in place of the unregistered one", func() bool {
			ids := lis.View().ByPeer(reg.Host().ID())
			return len(ids) == quota && !slices.ContainsFunc(ids, func(sa *record.SignedAgent) bool { return sa.Agent.AgentID == gone })
		})
		for _, sa := range lis.View().ByPeer(reg.Host().ID()) {
			if _, held := before[sa.Agent.AgentID]; !held && sa.Agent.Seq <= seqs[sa.Agent.AgentID] {
				t.Fatalf("promoted agent %s held at seq %d, quiet at %d: not announced anew", sa.Agent.AgentID, sa.Agent.Seq, seqs[sa.Agent.AgentID])
			}
		}
		if n := refused(); n != 0 {
			t.Fatalf("the listener refused %v of the registry's records over the quota", n)
		}
	})
}

// TestSyncAnswerStatesTheHostedInterval: a sync answer gives the hosted
// agents the interval they beat at (the budget's), not the base interval:
// a peer that synced a registry's agents judged them by 5 s.
func TestSyncAnswerStatesTheHostedInterval(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 1, Config{HeartbeatMaxRate: 0.4})
		reg := tn.nodes[0]
		registerMany(t, reg, 40)
		recs := gossipSink{reg.view, reg.vet, reg.heartbeatInterval}.LiveRecords(100, nil)
		if len(recs) != 40 {
			t.Fatalf("%d live records, want 40", len(recs))
		}
		for _, r := range recs {
			if r.Heard.Interval != 100*time.Second {
				t.Fatalf("hosted agent %s stated at %v, want the 100s it beats at", r.Record.Agent.AgentID, r.Heard.Interval)
			}
		}
	})
}
