package simnet

import (
	"runtime"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/node"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

// report assembles the report once the run is over.
func (sm *sim) report(setup SetupInfo) *Report {
	s := sm.s
	sec := func(d time.Duration) float64 { return d.Seconds() }
	hb, timeout := s.heartbeat()
	gc := gossip.DefaultConfig()
	if s.Node.Gossip != nil {
		gc = *s.Node.Gossip
	}
	meshD := pubsub.GossipSubD
	if gc.Params != nil {
		meshD = gc.Params.D
	}
	r := &Report{
		Scenario: ScenarioInfo{
			Kind: s.Kind, Nodes: s.Nodes, BootstrapNodes: s.BootstrapNodes, DurationS: sec(s.Duration), Seed: s.Seed,
			LatencyMS: float64(s.Latency) / 1e6, JitterMS: float64(s.Jitter) / 1e6, BandwidthBps: s.Bandwidth, ConnLow: s.ConnLow, ConnHigh: s.ConnHigh, ConnGraceS: s.ConnGrace.Seconds(), Loss: s.Loss, Scope: scopeOf(s.Node),
			MeshDegree: meshD, FloodPublish: gc.FloodPublish,
			QueryRate: s.QueryRate, QueryInterest: s.QueryInterest, Skills: s.Skills, Capabilities: s.Capabilities, Zipf: s.Zipf,
			HeartbeatInterval: sec(hb), GossipBeatEvery: node.EffectiveGossipBeatEvery(s.Node.GossipBeatEvery), BeatRequests: !s.Node.DisableBeatRequests, TrailingSyncs: s.Node.TrailingSyncs(), LivenessTimeoutS: sec(timeout), StaleAfterS: sec(s.StaleAfter),
			GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		},
		Setup: setup,
	}
	switch s.Kind {
	case KindChurn:
		r.Scenario.ChurnIntervalS, r.Scenario.ChurnFraction = sec(s.ChurnInterval), s.ChurnFraction
	case KindPartition:
		r.Scenario.PartitionAtS, r.Scenario.PartitionForS = sec(s.PartitionAt), sec(s.PartitionFor)
	case KindMassJoin:
		r.Scenario.MassJoin, r.Scenario.MassJoinAtS = s.MassJoin, sec(s.MassJoinAt)
	case KindSybil:
		r.Scenario.SybilAgents, r.Scenario.SybilRate, r.Scenario.SybilAtS = s.SybilAgents, s.SybilRate, sec(s.SybilAt)
	}
	sm.mu.Lock()
	sr := sm.sybil
	sm.mu.Unlock()
	if sr != nil {
		y := sr.finish()
		r.Sybil = &y
	}

	sm.mu.Lock()
	defer sm.mu.Unlock()
	q := sm.q
	q.Errors = map[string]int{}
	for k, v := range sm.q.Errors {
		q.Errors[k] = v
	}
	o := q.Outcome
	q.Recall = o.Recall()
	q.RecallAllLive = ratio(o.FoundAll, o.ExpectedAll, 1)
	q.RecallMean = ratioF(sm.recallSum, q.Scored, 1)
	q.FullRecall = ratio(sm.fullRecall, q.Scored, 1)
	q.StaleRate = o.StaleRate()
	q.StaleUnflaggedRate = ratio(o.Stale-o.StaleFlagged, o.Returned, 0)
	q.StaleDeadFor = sm.staleDead.summary()
	q.StaleAtLaterJoiner = sm.staleLate
	q.StaleBySource = map[string]int{}
	for k, v := range sm.staleBy {
		q.StaleBySource[k] = v
	}
	r.Queries = q

	r.Latency = LatencyInfo{All: sm.lat.summary(), BySource: map[string]Percentiles{}}
	for k, v := range sm.latBy {
		r.Latency.BySource[k] = v.summary()
	}
	r.Gossip = GossipStats{
		SampledOneIn: int(sm.probe.every), Propagation: sm.probe.all.summary(), ByKind: map[string]Percentiles{},
		ProbeDropped: sm.probe.dropped.Load(), RPCDrops: sm.probe.rpcDrops.Load(), Undeliverable: sm.probe.undeliverable.Load(),
		CatchUp: sm.probe.catchUp.Load(), ResendsUnmeasured: sm.probe.unpublished.Load(), Interest: sm.interestAt, PubsubIn: sm.mix.perNodeSecond(sm.nodeSecs),
	}
	if m := r.Gossip.PubsubIn; m != nil {
		m.Gated = float64(sm.gated) / sm.nodeSecs
	}
	for k, v := range sm.probe.byKind {
		if k == gossip.KindBeats && v.count() == 0 {
			continue // reported once a scenario's nodes host enough agents to send heartbeat batches
		}
		r.Gossip.ByKind[k] = v.summary()
	}

	c := sm.churn
	c.CrashToGone, c.LeaveToGone, c.JoinToVisible = sm.crashGone.summary(), sm.leaveGone.summary(), sm.joinSeen.summary()
	c.CrashToGoneAll, c.LeaveToGoneAll = sm.crashGoneAll.summary(), sm.leaveGoneAll.summary()
	for _, p := range sm.pend {
		switch {
		case p.kind == "join":
			c.JoinUnresolved++
		case p.kind == "crash" && !p.survivorsDone:
			c.CrashUnresolved++
		case p.kind == "crash":
			c.CrashLingering++
		case !p.survivorsDone:
			c.LeaveUnresolved++
		default:
			c.LeaveLingering++
		}
	}
	for _, w := range sm.watches {
		c.Reconverge = append(c.Reconverge, Reconverge{Event: w.event, AtS: w.at.Sub(sm.t0).Seconds(), S: -1})
	}
	c.CloseErrors, c.CloseErrorSamples = sm.closeErrN, append([]string(nil), sm.closeErrs...)
	r.Churn = c
	r.NodeErrors = append([]string(nil), sm.opErrs...)

	// sm.traffic0 and sm.boot0 hold the window's deltas by now.
	t := TrafficInfo{NodeSeconds: sm.nodeSecs, ByProtocol: map[string]ClassTraffic{}}
	if ns := sm.nodeSecs; ns > 0 {
		msgs, out, in := sm.traffic0.sum()
		t.MsgsPerNodeS, t.BytesOutPerNode, t.BytesInPerNode = float64(msgs)/ns, float64(out)/ns, float64(in)/ns
		for i := range nClasses {
			if sm.traffic0.Msgs[i] == 0 && sm.traffic0.Out[i] == 0 {
				continue
			}
			t.ByProtocol[classNames[i]] = ClassTraffic{MsgsPerS: float64(sm.traffic0.Msgs[i]) / ns, BytesOutPerS: float64(sm.traffic0.Out[i]) / ns}
		}
	}
	if bs := float64(s.BootstrapNodes) * sm.tEnd.Sub(sm.t0).Seconds(); bs > 0 {
		msgs, out, _ := sm.boot0.sum()
		t.BootstrapMsgsPerS, t.BootstrapBytesOutS = float64(msgs)/bs, float64(out)/bs
	}
	r.Traffic = t

	res := sm.res
	if res.Samples > 0 {
		res.GoroutinesPerNode = sm.goroSum / float64(res.Samples)
		res.HeapPerNodeMB = sm.heapSum / float64(res.Samples)
		res.StacksPerNodeMB = sm.stackSum / float64(res.Samples)
		res.Conns = sm.conns.mean(res.Samples)
		res.PeersPerNode = res.Conns.Peers
	}
	r.Resources = res

	for i, b := range sm.buckets {
		start := time.Duration(i) * s.SampleInterval
		if !sm.tEnd.IsZero() && sm.t0.Add(start).After(sm.tEnd) {
			break
		}
		p := b.lat.summary()
		bk := Bucket{StartS: sec(start), Live: b.live, Queries: b.queries, P50MS: p.P50, P95MS: p.P95, MsgsPerS: b.msgs, BytesOut: b.bytes, HeapMB: b.heapMB}
		if b.out.Expected > 0 {
			v := b.out.Recall()
			bk.Recall = &v
		}
		if b.out.Returned > 0 {
			v := b.out.StaleRate()
			bk.Stale = &v
		}
		r.Timeline = append(r.Timeline, bk)
	}
	r.Marks = append(r.Marks, sm.marks...)
	return r
}

func ratioF(a float64, b int, empty float64) float64 {
	if b == 0 {
		return empty
	}
	return a / float64(b)
}

// scopeOf is the scope every agent node runs with.
func scopeOf(c node.Config) string {
	if c.Scope == "" {
		return node.ScopeInterest
	}
	return c.Scope
}
