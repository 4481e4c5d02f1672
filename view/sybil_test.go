package view

import (
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// mintedBy signs a record of a fresh agent (its own agent id and key) with
// the peer key of host: what one peer flooding fake agents publishes.
func mintedBy(t *testing.T, host *trust.Identity, now time.Time, confidence float64) *record.SignedAgent {
	t.Helper()
	k := newAgent(t)
	sk := record.Skill{SkillID: "skill-x", Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "10.0.0.1:8080",
		Capabilities: []record.Capability{{ID: "x", ConfidenceHint: conf(confidence)}}}
	a := &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"}, Skills: []record.Skill{sk}}
	a.Fill(k.id.AgentID, host.PeerID.String(), k.id.PublicKeyPEM(), 1, now, time.Hour)
	sa, err := record.Sign(a, k.id.AgentKey, host.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func newSybilFixture(t *testing.T, perPeer int) (*fixture, *metrics.Metrics) {
	t.Helper()
	f := newFixture(t)
	m := metrics.New(false)
	_ = f.v.Close()
	f.v = New(Config{Now: f.clk.Now, MaxAgentsPerPeer: perPeer}, f.st, nil, m, nil)
	t.Cleanup(func() { _ = f.v.Close() })
	return f, m
}

// One peer cannot put more than MaxAgentsPerPeer agents into the live view
// (issue 12 item 1: 9 000 of 10 000 minted agents got in); others are not
// affected, each refusal is counted, and room frees up as agents leave.
func TestOnePeerCannotFillTheView(t *testing.T) {
	f, m := newSybilFixture(t, 4)
	flooder := newAgent(t).id
	var minted []*record.SignedAgent
	for range 10 {
		sa := mintedBy(t, flooder, f.clk.Now(), 1)
		minted = append(minted, sa)
		f.v.Announce(sa, flooder.PeerID, "")
	}
	honest := newAgent(t)
	f.v.Announce(honest.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.1}), honest.id.PeerID, "")
	if got := f.v.Len(); got != 5 {
		t.Fatalf("live view holds %d agents, want 4 of the flooder and the honest one", got)
	}
	if _, ok := f.v.Get(honest.id.AgentID); !ok {
		t.Fatal("the honest agent is not in the view")
	}
	err := f.v.CheckAnnounce(minted[9])
	if trust.ReasonOf(err) != trust.ReasonPeerQuota {
		t.Fatalf("CheckAnnounce beyond the quota = %v, want peer_quota", err)
	}
	if got := counter(m.Rejects.WithLabelValues("view", "peer_quota")); got != 6 {
		t.Fatalf("peer_quota rejects = %v, want 6", got)
	}
	if n := f.st.Len(); n != 5 {
		t.Fatalf("the cache holds %d records; refused records must not cost a cache entry", n)
	}
	// A newer record of an admitted agent is not a new agent.
	if err := f.v.CheckAnnounce(minted[0]); trust.ReasonOf(err) != trust.ReasonReplay {
		t.Fatalf("same record again: %v", err)
	}
	f.v.Forget(minted[0].Agent.AgentID, "test")
	if err := f.v.CheckAnnounce(minted[9]); err != nil {
		t.Fatalf("after one left: %v", err)
	}
	f.v.Announce(minted[9], flooder.PeerID, "")
	if _, ok := f.v.Get(minted[9].Agent.AgentID); !ok || f.v.Len() != 5 {
		t.Fatalf("room freed by a departure was not used (len %d)", f.v.Len())
	}
}

// A claimed heartbeat interval is clamped: an agent that claims to beat
// once a day and then stays silent leaves the view within the liveness
// timeout of the bound, not after days; sync claims are clamped the same
// way.
func TestClaimedIntervalIsBounded(t *testing.T) {
	f, m := newSybilFixture(t, 0)
	k := newAgent(t)
	f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), k.id.PeerID, "")
	day := record.Beat{AgentID: k.id.AgentID, PeerID: k.id.PeerID.String(), Seq: 2, Timestamp: time.Now().UnixMilli(), IntervalMS: 86_400_000}
	sb, err := record.SignBeat(day, k.id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, sb, k.id.PeerID, "")
	a, _ := f.v.Get(k.id.AgentID)
	if lim := 12 * 5 * time.Second; a.Interval != lim {
		t.Fatalf("claimed interval of a day kept as %v, want the bound %v", a.Interval, lim)
	}
	if got := counter(m.Rejects.WithLabelValues("view", "interval_clamped")); got != 1 {
		t.Fatalf("interval_clamped = %v", got)
	}
	f.clk.Add(f.v.TimeoutFor(12*5*time.Second) + time.Second)
	f.v.sweep()
	if _, ok := f.v.Get(k.id.AgentID); ok {
		t.Fatal("an agent silent past the bound's timeout is still live")
	}

	s := newAgent(t)
	if err := f.v.Synced(s.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), time.Second, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.v.Get(s.id.AgentID); a.Interval != 12*5*time.Second {
		t.Fatalf("synced interval claim kept as %v", a.Interval)
	}
}

// Answers are ranked so that one peer's many agents claiming the highest
// confidence cannot push other peers' agents out of a limited answer.
func TestRankingRoundRobinsAcrossPeers(t *testing.T) {
	f, _ := newSybilFixture(t, 64)
	flooder := newAgent(t).id
	for range 30 {
		f.v.Announce(mintedBy(t, flooder, f.clk.Now(), 1), flooder.PeerID, "")
	}
	h1, h2 := newAgent(t), newAgent(t)
	f.clk.Add(time.Second) // the honest agents are even newer than the flood
	f.v.Announce(h1.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.1}), h1.id.PeerID, "")
	f.v.Announce(h2.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 0.05}), h2.id.PeerID, "")

	m, err := store.Filter{Capability: "x"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	got := f.v.Query(m, 3)
	seen := map[string]bool{}
	for _, a := range got {
		seen[a.Record.Agent.PeerID] = true
	}
	if len(got) != 3 || !seen[h1.id.PeerID.String()] || !seen[h2.id.PeerID.String()] || !seen[flooder.PeerID.String()] {
		t.Fatalf("limit-3 answer does not hold one agent of each peer: %d answers, peers %v", len(got), seen)
	}
	ps := f.v.Lookup("x")
	top := map[string]bool{}
	for _, p := range ps[:3] {
		top[p.PeerID] = true
	}
	if len(top) != 3 {
		t.Fatalf("the three best providers come from %d peers, want 3", len(top))
	}
	if ps[0].PeerID != flooder.PeerID.String() || ps[1].AgentID != h1.id.AgentID || ps[2].AgentID != h2.id.AgentID {
		t.Fatalf("within a round peers go by their best confidence: got %s %s %s", ps[0].AgentID, ps[1].AgentID, ps[2].AgentID)
	}
	if len(ps) != 32 {
		t.Fatalf("Lookup lost providers: %d", len(ps))
	}
}

func counter(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return -1
	}
	return d.GetCounter().GetValue()
}

// A record whose peer has not been reached is held outside the live view
// (no cache write, not in answers) until the node reaches that peer; a
// peer key minted for every fake therefore buys nothing. Held records
// expire after the timeout and are counted; the hold is bounded.
func TestUnvettedPeersAreHeldOutside(t *testing.T) {
	f := newFixture(t)
	m := metrics.New(false)
	_ = f.v.Close()
	vetted := map[string]bool{}
	var asked []string
	f.v = New(Config{Now: f.clk.Now, MaxPending: 3,
		Vetted:     func(p string) bool { return vetted[p] },
		RequestVet: func(p string) { asked = append(asked, p) },
	}, f.st, nil, m, nil)
	t.Cleanup(func() { _ = f.v.Close() })

	a, b := newAgent(t), newAgent(t)
	f.v.Announce(a.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), a.id.PeerID, "")
	if f.v.Len() != 0 || f.v.Pending() != 1 || f.st.Len() != 0 {
		t.Fatalf("unvetted record: view %d, held %d, cached %d; want 0, 1, 0", f.v.Len(), f.v.Pending(), f.st.Len())
	}
	if len(asked) != 1 || asked[0] != a.id.PeerID.String() {
		t.Fatalf("vetting asked for %v", asked)
	}
	vetted[a.id.PeerID.String()] = true
	f.v.PeerVetted(a.id.PeerID.String())
	if _, ok := f.v.Get(a.id.AgentID); !ok || f.v.Pending() != 0 {
		t.Fatalf("vetted peer's record not admitted (held %d)", f.v.Pending())
	}
	// Records from other paths than gossip (a DHT or LAN fetch reached the
	// peer already) and news of admitted agents are not held.
	if err := f.v.Learn(b.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), store.SourceDHT, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.v.Get(b.id.AgentID); !ok {
		t.Fatal("a fetched record was held")
	}

	// The hold is bounded and expires.
	for range 4 {
		k := newAgent(t)
		f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), k.id.PeerID, "")
	}
	if f.v.Pending() != 3 || counter(m.Rejects.WithLabelValues("view", "pending_full")) != 1 {
		t.Fatalf("held %d, pending_full %v; want 3 and 1", f.v.Pending(), counter(m.Rejects.WithLabelValues("view", "pending_full")))
	}
	f.clk.Add(31 * time.Second)
	f.v.sweep()
	if f.v.Pending() != 0 || counter(m.Rejects.WithLabelValues("view", "unvetted_expired")) != 3 {
		t.Fatalf("held %d after the timeout, unvetted_expired %v", f.v.Pending(), counter(m.Rejects.WithLabelValues("view", "unvetted_expired")))
	}
}

// Peers reached at one public address prefix share MaxAgentsPerPrefix.
func TestPrefixQuota(t *testing.T) {
	f := newFixture(t)
	m := metrics.New(false)
	_ = f.v.Close()
	f.v = New(Config{Now: f.clk.Now, MaxAgentsPerPrefix: 2,
		PrefixOf: func(string) string { return "198.18.7.0/24" }}, f.st, nil, m, nil)
	t.Cleanup(func() { _ = f.v.Close() })
	var ks []*agentKeys
	for range 3 {
		k := newAgent(t)
		ks = append(ks, k)
		f.v.Announce(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), k.id.PeerID, "")
	}
	if f.v.Len() != 2 || counter(m.Rejects.WithLabelValues("view", "prefix_quota")) != 1 {
		t.Fatalf("view %d, prefix_quota %v; want 2 and 1", f.v.Len(), counter(m.Rejects.WithLabelValues("view", "prefix_quota")))
	}
	f.v.Forget(ks[0].id.AgentID, "test")
	f.v.Announce(ks[2].sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), ks[2].id.PeerID, "")
	if _, ok := f.v.Get(ks[2].id.AgentID); !ok {
		t.Fatal("room freed in the prefix was not used")
	}
}

// A remote agent that becomes hosted here (ApplyLocal) leaves its peer's
// and its prefix's quota.
func TestHostedAgentLeavesTheQuotas(t *testing.T) {
	f := newFixture(t)
	_ = f.v.Close()
	f.v = New(Config{Now: f.clk.Now, MaxAgentsPerPeer: 1, MaxAgentsPerPrefix: 1,
		PrefixOf: func(string) string { return "198.18.7.0/24" }}, f.st, nil, nil, nil)
	t.Cleanup(func() { _ = f.v.Close() })
	a, b := newAgent(t), newAgent(t)
	ra := a.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1})
	f.v.Announce(ra, a.id.PeerID, "")
	f.v.Announce(b.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), b.id.PeerID, "")
	if _, ok := f.v.Get(b.id.AgentID); ok {
		t.Fatal("the prefix quota of 1 admitted a second agent")
	}
	f.v.ApplyLocal(a.sign(t, 2, f.clk.Now(), nil, map[string]float64{"x": 1}))
	if f.v.CountByPeer(a.id.PeerID) != 0 {
		t.Fatalf("a hosted agent still counts under its peer: %d", f.v.CountByPeer(a.id.PeerID))
	}
	f.v.Announce(b.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), b.id.PeerID, "")
	if _, ok := f.v.Get(b.id.AgentID); !ok {
		t.Fatal("the prefix slot of the agent now hosted here was not freed")
	}
}

// A peer at its quota is not asked for the records of the agents it beats
// for: they could not be admitted, and each ask costs the host a signed
// answer (a registry node hosting thousands got one per beat).
func TestNoFetchForAPeerAtItsQuota(t *testing.T) {
	f, _ := newSybilFixture(t, 2)
	var asked []string
	f.v.OnUnknownAgent(func(agentID string, _ peer.ID, _ time.Duration) { asked = append(asked, agentID) })
	host := newAgent(t).id
	for range 2 {
		f.v.Announce(mintedBy(t, host, f.clk.Now(), 1), host.PeerID, "")
	}
	other := newAgent(t).id
	f.v.UnknownAgent("11111111-1111-4111-8111-111111111111", other.PeerID, 0)
	f.v.UnknownAgent("22222222-2222-4222-8222-222222222222", host.PeerID, 0)
	if len(asked) != 1 || asked[0] != "11111111-1111-4111-8111-111111111111" {
		t.Fatalf("asked for %v; want only the agent of the peer below its quota", asked)
	}
}

// A node beats every agent it hosts at one interval, so an agent learnt
// from an announcement (which states no interval) is judged by the
// interval its peer's other agents claim, not the default: a registry's
// agents went UNHEALTHY 15 s after they were announced.
func TestAgentJudgedByItsPeersInterval(t *testing.T) {
	f, _ := newSybilFixture(t, 0)
	host := newAgent(t).id
	mint := func() (*agentKeys, *record.SignedAgent) {
		k := newAgent(t)
		a := &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"},
			Skills: []record.Skill{{SkillID: "skill-x", Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "10.0.0.1:8080", Capabilities: []record.Capability{{ID: "x"}}}}}
		a.Fill(k.id.AgentID, host.PeerID.String(), k.id.PublicKeyPEM(), 1, f.clk.Now(), time.Hour)
		sa, err := record.Sign(a, k.id.AgentKey, host.PeerKey)
		if err != nil {
			t.Fatal(err)
		}
		return k, sa
	}
	beating, sa1 := mint()
	_, sa2 := mint()
	f.v.Announce(sa1, host.PeerID, "")
	f.v.Announce(sa2, host.PeerID, "")
	b := record.Beat{AgentID: beating.id.AgentID, PeerID: host.PeerID.String(), Seq: 2, Timestamp: f.clk.Now().UnixMilli(), IntervalMS: 60_000}
	sb, err := record.SignBeat(b, beating.id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	f.v.Beat(KindHeartbeat, sb, host.PeerID, "")
	f.clk.Add(20 * time.Second) // past 3 default intervals, within 3 of the peer's
	f.v.sweep()
	for _, sa := range []*record.SignedAgent{sa1, sa2} {
		if a, ok := f.v.Get(sa.Agent.AgentID); !ok || a.Status != record.StatusHealthy {
			t.Fatalf("agent %s: %v %v after 20 s of a peer beating every 60 s", sa.Agent.AgentID, ok, a.Status)
		}
	}
	// What the view reports (Explain, the console) agrees with the clock.
	a2, _ := f.v.Get(sa2.Agent.AgentID)
	if unhealthy, _ := f.v.Deadlines(a2); a2.Interval != time.Minute || !unhealthy.Equal(a2.LastHeard.Add(3*time.Minute)) {
		t.Fatalf("the silent agent is reported judged by %v, UNHEALTHY at %v; want its peer's 1m0s, 3 minutes after it was heard", a2.Interval, unhealthy.Sub(a2.LastHeard))
	}
	f.clk.Add(f.v.TimeoutFor(time.Minute))
	f.v.sweep()
	if _, ok := f.v.Get(sa2.Agent.AgentID); ok {
		t.Fatal("the silent agent outlived its peer's timeout")
	}
}

// A record fetched because a beat of its agent arrived first is judged by
// the interval that beat claimed (clamped), not the default.
func TestFetchedAgentJudgedByItsBeat(t *testing.T) {
	f, m := newSybilFixture(t, 0)
	k := newAgent(t)
	if err := f.v.LearnFetched(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), 50*time.Second); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(20 * time.Second) // past 3 default intervals, within 3 of the claim
	f.v.sweep()
	if a, ok := f.v.Get(k.id.AgentID); !ok || a.Status != record.StatusHealthy || a.Interval != 50*time.Second {
		t.Fatalf("fetched agent after 20 s: %v %v, judged by %v; want HEALTHY at 50s", ok, a.Status, a.Interval)
	}
	long := newAgent(t)
	if err := f.v.LearnFetched(long.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.v.Get(long.id.AgentID); a.Interval != 12*5*time.Second {
		t.Fatalf("a claim of a day kept as %v, want the bound", a.Interval)
	}
	if got := counter(m.Rejects.WithLabelValues("view", "interval_clamped")); got != 1 {
		t.Fatalf("interval_clamped = %v", got)
	}
}

// A node gossips at most MaxAgentsPerPeer of the agents it hosts, what
// each peer admits of one peer: the others are quiet, left out of sync
// answers and of the heartbeat budget, and one of them takes the place of
// a gossiped agent that leaves. A remote agent that becomes hosted here is
// counted like a registration.
func TestHostedBeyondTheQuotaAreQuiet(t *testing.T) {
	f := newFixture(t)
	_ = f.v.Close()
	f.v = New(Config{Now: f.clk.Now, MaxAgentsPerPeer: 2}, f.st, nil, nil, nil)
	t.Cleanup(func() { _ = f.v.Close() })
	var hosted []string
	var keys []*agentKeys
	for range 4 {
		k := newAgent(t)
		keys = append(keys, k)
		f.v.ApplyLocal(k.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}))
		hosted = append(hosted, k.id.AgentID)
	}
	remote := newAgent(t)
	f.v.Announce(remote.sign(t, 1, f.clk.Now(), nil, map[string]float64{"x": 1}), remote.id.PeerID, "")

	gossiped, quiet := f.v.HostedIDs(false), f.v.HostedIDs(true)
	if want := slices.Sorted(slices.Values(hosted[:2])); !slices.Equal(gossiped, want) {
		t.Fatalf("gossiped %v, want the first two registered %v", gossiped, want)
	}
	if len(quiet) != 2 || f.v.QuietCount() != 2 || !f.v.Quiet(hosted[3]) || f.v.Quiet(hosted[0]) || f.v.Quiet(remote.id.AgentID) {
		t.Fatalf("quiet %v (count %d)", quiet, f.v.QuietCount())
	}
	if a, _ := f.v.Get(hosted[2]); !a.Quiet {
		t.Fatal("a quiet agent's snapshot says it is gossiped")
	}
	if n := f.v.Beating(); n != 3 {
		t.Fatalf("%d agents beating, want the 2 gossiped and the remote one", n)
	}
	var synced []string
	for _, lr := range f.v.LiveRecords(10, nil) {
		synced = append(synced, lr.Record.Agent.AgentID)
	}
	if len(synced) != 3 || slices.Contains(synced, hosted[2]) || slices.Contains(synced, hosted[3]) {
		t.Fatalf("sync answer %v holds quiet agents", synced)
	}
	// Replacing a hosted record keeps its place.
	for i, k := range keys {
		f.v.ApplyLocal(k.sign(t, 2, f.clk.Now(), nil, map[string]float64{"y": 1}))
		if f.v.Quiet(hosted[i]) != (i >= 2) {
			t.Fatalf("agent %d quiet %v after its record was replaced", i, f.v.Quiet(hosted[i]))
		}
	}
	if promoted := f.v.RemoveLocal(hosted[2], record.ReasonShutdown); promoted != "" {
		t.Fatalf("a quiet agent's unregistration promoted %s", promoted)
	}
	promoted := f.v.RemoveLocal(hosted[0], record.ReasonShutdown)
	if promoted != hosted[3] || f.v.Quiet(hosted[3]) || f.v.QuietCount() != 0 {
		t.Fatalf("promoted %q, want the last quiet agent %s (quiet now: %d)", promoted, hosted[3], f.v.QuietCount())
	}
	if got, want := f.v.HostedIDs(false), slices.Sorted(slices.Values([]string{hosted[1], hosted[3]})); !slices.Equal(got, want) {
		t.Fatalf("gossiped after the promotion %v, want %v", got, want)
	}
	// The remote agent, now hosted here, finds the two places taken.
	f.v.ApplyLocal(remote.sign(t, 2, f.clk.Now(), nil, map[string]float64{"x": 1}))
	if !f.v.Quiet(remote.id.AgentID) || f.v.Beating() != 2 {
		t.Fatalf("a remote agent hosted here beyond the quota: quiet %v, %d beating", f.v.Quiet(remote.id.AgentID), f.v.Beating())
	}
}
