package simnet

import (
	"context"
	"fmt"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/backoff"
	agentdmetrics "github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/google/uuid"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	dto "github.com/prometheus/client_model/go"
)

// hostileIdx is the host index of the sybil scenario's hostile peer (its
// mocknet address; it is not one of the scenario's nodes).
const hostileIdx = 0xfff0

// sybilDayMS is the heartbeat interval every fake claims: one day.
const sybilDayMS = 86_400_000

// SybilStats is what the hostile peer of KindSybil achieved.
type SybilStats struct {
	// FreshPeers: every fake was signed by a peer key of its own.
	FreshPeers bool `json:"fresh_peer_keys"`
	// Published is the number of fake agents announced (each followed by
	// a heartbeat claiming a one-day interval).
	Published int `json:"published"`
	// FloodS is how long publishing took; the hostile peer crashed then.
	FloodS float64 `json:"flood_s"`
	// MaxAdmitted is the most fakes one honest node held in its live view
	// at any sample; MaxAdmittedSum the most summed over every honest node.
	MaxAdmitted    int `json:"max_admitted_per_node"`
	MaxAdmittedSum int `json:"max_admitted_all_nodes"`
	// GoneS is how long after the hostile peer stopped the last fake left
	// the last honest view (-1: some were still there at the end).
	GoneS float64 `json:"gone_after_stop_s"`
	// Left is the number of fakes still in honest views at the end.
	Left int `json:"left_at_end"`
	// IntervalBeforeS and IntervalMaxS are the honest nodes' own heartbeat
	// interval just before the flood and the longest seen during it.
	IntervalBeforeS float64 `json:"honest_interval_before_s"`
	IntervalMaxS    float64 `json:"honest_interval_max_s"`
	// FakeIntervalMaxS is the longest heartbeat interval an honest view
	// judged a fake by (each claims a day; a view clamps a claim to its
	// node's MaxClaimedInterval, FakeIntervalBoundS the longest of those);
	// FakeIntervalOver counts the samples of a fake judged by more than its
	// view's bound.
	FakeIntervalMaxS   float64 `json:"fake_interval_max_s"`
	FakeIntervalBoundS float64 `json:"fake_interval_bound_s"`
	FakeIntervalOver   int     `json:"fake_interval_over_bound"`
	// HeapBeforeMB and HeapMaxMB are the process's live heap (all nodes;
	// as of the last GC) just before the flood and the largest during it.
	HeapBeforeMB float64 `json:"heap_before_mb"`
	HeapMaxMB    float64 `json:"heap_max_mb"`
	// HeapGrowthPerNodeMB is the growth divided by the nodes in the
	// process (agent, bootstrap and hostile nodes): each victim's share,
	// as every honest node receives the whole flood.
	HeapGrowthPerNodeMB float64 `json:"heap_growth_per_node_mb"`
	// Refused sums, over the honest nodes, the refusals by reason
	// (transport view and gossip).
	Refused map[string]float64 `json:"refused"`
	// MinScore is the lowest gossip score an honest node gave the hostile
	// peer while it was connected.
	MinScore float64 `json:"hostile_min_gossip_score"`
	// Answers: queries by capability answered with the API's default
	// limit during and after the flood, and how many of them left out an
	// honest live provider that the node's live view held.
	Answers       int `json:"answers_checked"`
	AnswersMissed int `json:"answers_missing_an_honest_agent"`
}

// sybilAnswerLimit is the API's default limit (api.DefaultLimit).
const sybilAnswerLimit = 100

// sybilRun is the hostile peer and its measurements.
type sybilRun struct {
	sm  *sim
	n   *node.Node // the hostile agentd node (nil with fresh peer keys)
	vn  *vnode
	pid peer.ID
	// With fresh peer keys: a bare GossipSub router on the hostile host.
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	fakes sync.Map // fake agent id -> struct{}

	mu      sync.Mutex
	stats   SybilStats
	stopped time.Time
	done    bool
}

// doSybil starts the hostile peer and the flood (EventSybil).
func (sm *sim) doSybil(ev Event) {
	sm.mark(EventSybil, time.Now(), fmt.Sprintf("%d fake agents at %g/s", sm.s.SybilAgents, sm.s.SybilRate))
	id, err := trust.Generate()
	if err != nil {
		sm.opFailed(fmt.Errorf("sybil identity: %w", err))
		return
	}
	h, err := sm.net.host(hostileIdx, id)
	if err != nil {
		sm.opFailed(err)
		return
	}
	vn := &vnode{idx: hostileIdx, id: id, raw: h, tr: &traffic{}}
	if sm.s.SybilFreshPeers {
		sm.startFreshSybil(vn)
		return
	}
	st, err := store.Open(store.Options{CacheTTL: sm.s.Node.CacheTTL, Logger: sm.s.NodeLogger})
	if err != nil {
		sm.opFailed(err)
		return
	}
	sh, err := sm.attachHost(vn)
	if err != nil {
		sm.opFailed(err)
		_ = st.Close()
		return
	}
	sm.mu.Lock()
	boots := slices.Clone(sm.boots)
	sm.mu.Unlock()
	cfg := sm.s.Node
	cfg.Bootstrap = boots
	gc := gossip.DefaultConfig()
	cfg.Gossip = &gc
	n, err := node.New(cfg, node.Options{Identity: id, Host: sh, Store: st, Metrics: agentdmetrics.New(false), Logger: sm.s.NodeLogger.With("node", "hostile")})
	if err == nil {
		err = n.Start(sm.ctx)
	}
	if err != nil {
		sm.opFailed(fmt.Errorf("start the hostile peer: %w", err))
		_ = st.Close()
		_ = sm.detachHost(vn)
		return
	}
	vn.n, vn.st = n, st
	sr := &sybilRun{sm: sm, n: n, vn: vn, pid: id.PeerID}
	sr.begin()
}

// startFreshSybil starts the fresh-peer-key attacker: a bare GossipSub
// router on the hostile host, connected to the bootstrap nodes and to a
// few honest nodes, that authors each fake's messages with the fake's own
// peer key.
func (sm *sim) startFreshSybil(vn *vnode) {
	sh, err := sm.attachHost(vn)
	if err != nil {
		sm.opFailed(err)
		return
	}
	ps, err := pubsub.NewGossipSub(sm.ctx, sh, pubsub.WithMessageIdFn(gossip.MessageID),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign), pubsub.WithFloodPublish(true))
	if err == nil {
		var topic *pubsub.Topic
		topic, err = ps.Join(gossip.AnnounceTopic)
		if err == nil {
			sr := &sybilRun{sm: sm, vn: vn, pid: vn.id.PeerID, ps: ps, topic: topic}
			sr.stats.FreshPeers = true
			sr.begin()
			ctx, cancel := context.WithTimeout(sm.ctx, 10*time.Second)
			defer cancel()
			for i, n := range sm.upNodes() {
				if i >= 5 {
					break
				}
				_ = sh.Connect(ctx, peer.AddrInfo{ID: n.Host().ID(), Addrs: n.Host().Addrs()})
			}
			return
		}
	}
	sm.opFailed(fmt.Errorf("start the fresh-key hostile peer: %w", err))
	_ = sm.detachHost(vn)
}

// begin records the state before the flood and starts it.
func (sr *sybilRun) begin() {
	sm := sr.sm
	sr.stats.Refused = map[string]float64{}
	sr.stats.GoneS = -1
	sr.stats.IntervalBeforeS = sr.honestInterval().Seconds()
	sr.stats.HeapBeforeMB = heapMB()
	sm.mu.Lock()
	sm.sybil = sr
	sm.mu.Unlock()
	sm.ops.Add(2)
	go func() { defer sm.ops.Done(); sr.flood() }()
	go func() { defer sm.ops.Done(); sr.watch() }()
}

// honestInterval is the longest heartbeat interval of the up agent nodes.
func (sr *sybilRun) honestInterval() time.Duration {
	var d time.Duration
	for _, n := range sr.sm.upNodes() {
		d = max(d, n.HeartbeatInterval())
	}
	return d
}

func heapMB() float64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// flood publishes the fakes, then crashes the hostile peer.
func (sr *sybilRun) flood() {
	sm := sr.sm
	ctx := sm.ctx
	start := time.Now()
	every := time.Duration(float64(time.Second) / sm.s.SybilRate)
	skills := sm.cat.Skills[:min(5, len(sm.cat.Skills))]
	for i := range sm.s.SybilAgents {
		sm.mu.Lock()
		ended := !sm.tEnd.IsZero()
		sm.mu.Unlock()
		if ctx.Err() != nil || ended {
			break
		}
		k, err := trust.Generate()
		if err != nil {
			sm.opFailed(err)
			break
		}
		s := skills[i%len(skills)]
		sk := record.Skill{SkillID: s.ID, Version: "1.0.0", SkillType: record.SkillTool}
		one := 1.0
		for _, c := range s.Capabilities {
			sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c, ConfidenceHint: &one})
		}
		a := &record.Agent{AgentName: fmt.Sprintf("fake-%d", i), Transport: record.Transport{Type: "tcp", Endpoint: "10.255.255.1:9000"}, Skills: []record.Skill{sk}}
		peerKey := sr.vn.id.PeerKey
		if sr.ps != nil {
			peerKey = k.PeerKey // a peer key of its own
		}
		pid, _ := peer.IDFromPrivateKey(peerKey)
		a.Fill(uuid.NewString(), pid.String(), k.PublicKeyPEM(), 1, time.Now(), time.Hour)
		sr.fakes.Store(a.AgentID, struct{}{})
		sa, err := record.Sign(a, k.AgentKey, peerKey)
		var sb *record.SignedBeat
		if err == nil {
			sb, err = record.SignBeat(record.Beat{AgentID: a.AgentID, PeerID: a.PeerID, Seq: 2, Status: record.StatusHealthy,
				Timestamp: time.Now().UnixMilli(), IntervalMS: sybilDayMS}, k.AgentKey)
		}
		switch {
		case err != nil:
		case sr.ps != nil:
			var data []byte
			if data, err = gossip.EncodeAnnounce(sa); err == nil {
				err = sr.topic.Publish(ctx, data, pubsub.WithSecretKeyAndPeerId(peerKey, pid))
			}
			if err == nil {
				if data, err = gossip.EncodeBeat(gossip.KindHeartbeat, sb); err == nil {
					err = sr.topic.Publish(ctx, data, pubsub.WithSecretKeyAndPeerId(peerKey, pid))
				}
			}
		default:
			err = sr.n.Gossip().PublishAnnounce(ctx, sa)
			if err == nil {
				err = sr.n.Gossip().PublishBeat(ctx, gossip.KindHeartbeat, sb)
			}
		}
		if err != nil && ctx.Err() == nil {
			sm.opFailed(fmt.Errorf("sybil publish %d: %w", i, err))
			break
		}
		sr.mu.Lock()
		sr.stats.Published++
		sr.mu.Unlock()
		if !backoff.Sleep(ctx, every) {
			break
		}
	}
	// The hostile peer stops: it crashes, as an attacker's host would
	// simply go away.
	sm.net.detach(hostileIdx)
	now := time.Now()
	sr.mu.Lock()
	sr.stats.FloodS = now.Sub(start).Seconds()
	sr.stopped = now
	sr.mu.Unlock()
	sm.mark(EventSybil, now, "hostile peer stopped")
}

// watch samples the honest nodes every second until the run ends.
func (sr *sybilRun) watch() {
	sm := sr.sm
	for {
		sr.sample()
		select {
		case <-sm.ctx.Done():
			return
		default:
		}
		sm.mu.Lock()
		ended := !sm.tEnd.IsZero()
		sm.mu.Unlock()
		if ended {
			return
		}
		if !backoff.Sleep(sm.ctx, time.Second) {
			return
		}
	}
}

func (sr *sybilRun) sample() {
	now := time.Now()
	sum, most := 0, 0
	iv := time.Duration(0)
	var scores []float64
	nodes := sr.sm.upNodes()
	var fakeIv, bound time.Duration
	over := 0
	for _, n := range nodes {
		c, fiv, o := sr.count(n)
		sum += c
		most = max(most, c)
		fakeIv, over = max(fakeIv, fiv), over+o
		bound = max(bound, n.MaxClaimedInterval())
		iv = max(iv, n.HeartbeatInterval())
		if s, ok := n.Gossip().PeerScores()[sr.pid]; ok {
			scores = append(scores, s)
		}
	}
	heap := heapMB()
	sr.mu.Lock()
	defer sr.mu.Unlock()
	st := &sr.stats
	st.MaxAdmitted = max(st.MaxAdmitted, most)
	st.MaxAdmittedSum = max(st.MaxAdmittedSum, sum)
	st.IntervalMaxS = max(st.IntervalMaxS, iv.Seconds())
	st.FakeIntervalMaxS = max(st.FakeIntervalMaxS, fakeIv.Seconds())
	st.FakeIntervalBoundS = max(st.FakeIntervalBoundS, bound.Seconds())
	st.FakeIntervalOver += over
	st.HeapMaxMB = max(st.HeapMaxMB, heap)
	for _, s := range scores {
		st.MinScore = min(st.MinScore, s)
	}
	st.Left = sum
	if !sr.stopped.IsZero() && sum == 0 && st.GoneS < 0 {
		st.GoneS = now.Sub(sr.stopped).Seconds()
	}
	if sum > 0 {
		st.GoneS = -1
	}
}

// count returns the number of fakes in n's live view, the longest
// heartbeat interval it judges one by, and how many it judges by more
// than n's MaxClaimedInterval.
func (sr *sybilRun) count(n *node.Node) (c int, longest time.Duration, over int) {
	bound := n.MaxClaimedInterval()
	judge := func(a view.Agent) {
		c++
		longest = max(longest, a.Interval)
		if a.Interval > bound {
			over++
		}
	}
	if sr.ps == nil {
		for _, sa := range n.View().ByPeer(sr.pid) {
			if a, ok := n.View().Get(sa.Agent.AgentID); ok {
				judge(a)
			}
		}
		return c, longest, over
	}
	for _, a := range n.View().Query(matchAll, 0) {
		if _, ok := sr.fakes.Load(a.Record.Agent.AgentID); ok {
			judge(a)
		}
	}
	return c, longest, over
}

var matchAll = func() *store.Matcher {
	m, err := store.Filter{}.Compile()
	if err != nil {
		panic(err)
	}
	return m
}()

// checkAnswer asks node n by capability with the API's default limit and
// reports whether every honest provider its live view holds is in the
// answer.
func (sr *sybilRun) checkAnswer(n *node.Node, capability string) {
	m, err := store.Filter{Capability: capability}.Compile()
	if err != nil {
		return
	}
	all := n.View().Query(m, 0)
	got := n.View().Query(m, sybilAnswerLimit)
	in := map[string]bool{}
	for _, a := range got {
		in[a.Record.Agent.AgentID] = true
	}
	missed := false
	for _, a := range all {
		if _, fake := sr.fakes.Load(a.Record.Agent.AgentID); !fake && !in[a.Record.Agent.AgentID] {
			missed = true
		}
	}
	sr.mu.Lock()
	sr.stats.Answers++
	if missed {
		sr.stats.AnswersMissed++
	}
	sr.mu.Unlock()
}

// finish closes the hostile node and sums the refusals.
func (sr *sybilRun) finish() SybilStats {
	for _, n := range sr.sm.upNodes() {
		sr.addRefusals(n.Metrics())
	}
	nodes := len(sr.sm.upNodes()) + sr.sm.s.BootstrapNodes + 1
	sr.mu.Lock()
	defer sr.mu.Unlock()
	st := sr.stats
	st.HeapGrowthPerNodeMB = max(0, st.HeapMaxMB-st.HeapBeforeMB) / float64(nodes)
	st.Refused = map[string]float64{}
	for k, v := range sr.stats.Refused {
		st.Refused[k] = v
	}
	return st
}

func (sr *sybilRun) addRefusals(m *agentdmetrics.Metrics) {
	if m == nil {
		return
	}
	fams, err := m.Registry.Gather()
	if err != nil {
		return
	}
	for _, f := range fams {
		if f.GetName() != "agentd_validation_rejects_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var tr, reason string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "transport":
					tr = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			switch reason {
			case "peer_quota", "interval_clamped", "unknown_key", "unvetted_author", "pending_full", "unvetted_expired", "vet_failed", "vet_queue_full", "prefix_quota":
				sr.mu.Lock()
				sr.stats.Refused[tr+"/"+reason] += counterOf(mt)
				sr.mu.Unlock()
			}
		}
	}
}

func counterOf(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// close stops the hostile node (at teardown).
func (sr *sybilRun) close() error {
	sr.mu.Lock()
	if sr.done {
		sr.mu.Unlock()
		return nil
	}
	sr.done = true
	sr.mu.Unlock()
	sr.sm.net.detach(hostileIdx)
	var err error
	if sr.n != nil {
		err = sr.n.Close()
		if cerr := sr.vn.st.Close(); err == nil {
			err = cerr
		}
	}
	if sr.topic != nil {
		if terr := sr.topic.Close(); err == nil {
			err = terr
		}
	}
	if derr := sr.sm.detachHost(sr.vn); err == nil {
		err = derr
	}
	return err
}

// upNodes returns the nodes of the up agent vnodes.
func (sm *sim) upNodes() []*node.Node {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var out []*node.Node
	for _, vn := range sm.nodes {
		if !vn.boot && vn.state == stateUp && vn.n != nil {
			out = append(out, vn.n)
		}
	}
	return out
}
