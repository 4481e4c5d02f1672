package simnet

import (
	"context"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/view"
)

// runScenario runs s in virtual time and returns its report, logging the
// table. The harness's own log goes to t.Log.
func runScenario(t *testing.T, s Scenario) *Report {
	t.Helper()
	s.Logger = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rep, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	return rep
}

// skipUnderRace skips the longer scenarios under -race, where the bubble
// runs on one P and they take minutes; TestSmokeRace covers the harness
// there.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("minutes under -race; run without -race (make simnet-smoke)")
	}
}

// TestSmoke is the 20-node, 20-second run of `make test`: the default
// churn (two nodes leave and two join every 10 s), production timers,
// looser thresholds than the 100-node target.
func TestSmoke(t *testing.T) {
	skipUnderRace(t)
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Nodes: 20, Duration: 20 * time.Second, Seed: 1, QueryRate: 10})
		checkRun(t, rep, 0.97, 0.03)
		c := rep.Churn
		if c.Left+c.Crashed != 2 || c.Joined+c.Restarted != 2 {
			t.Errorf("churn: %+v, want one event of 2 leaving and 2 joining", c)
		}
		if c.JoinToVisible.Count == 0 {
			t.Error("no join became visible everywhere")
		}
		if lat := rep.Gossip.Propagation; lat.Count == 0 || lat.P50 < 15 || lat.P50 > 1000 {
			t.Errorf("gossip propagation %+v: want a median of one or a few 20 ms hops", lat)
		}
		// The tail (issue 13 item 5): within twice the physical limit of a
		// few 20 ms hops plus an author's dial, and nothing dropped.
		if lat := rep.Gossip.Propagation; lat.P99 > 150 {
			t.Errorf("gossip propagation p99 %v ms, want ≤ 150", lat.P99)
		}
		if g := rep.Gossip; g.RPCDrops+g.Undeliverable > 0 {
			t.Errorf("pubsub dropped %d RPCs and %d deliveries", g.RPCDrops, g.Undeliverable)
		}
		checkDetection(t, rep)
	})
}

// checkDetection asserts that crashes were detected early (package
// liveness), well before the seed's 15 s UNHEALTHY mark, and that no live
// agent was evicted.
func checkDetection(t *testing.T, rep *Report) {
	t.Helper()
	c := rep.Churn
	if c.Crashed > 0 && (c.CrashToGone.Count == 0 || c.CrashToGone.P50 > 5000) {
		t.Errorf("crash → gone %+v: want a median under 5 s (early detection), not the 30 s timeout", c.CrashToGone)
	}
	if c.Crashed > 0 && c.Removals[view.ReasonPeerDown] == 0 {
		t.Errorf("no removal by early detection: %v", c.Removals)
	}
	if len(c.FalseRemovals) > 0 {
		t.Errorf("live agents evicted: %v", c.FalseRemovals)
	}
}

// TestSmokeLoss: churn under 5 % packet loss. Retransmissions delay
// heartbeats and probes by hundreds of milliseconds; no live agent may be
// evicted, and crashes are still detected early.
func TestSmokeLoss(t *testing.T) {
	skipUnderRace(t)
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Nodes: 16, Duration: 30 * time.Second, Seed: 5, QueryRate: 10, Loss: 0.05})
		checkRun(t, rep, 0.95, 0.03)
		checkDetection(t, rep)
	})
}

// TestSmokeRace is the race detector's view of the harness: a smaller run.
func TestSmokeRace(t *testing.T) {
	if !raceEnabled {
		t.Skip("TestSmoke covers this without -race")
	}
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Nodes: 8, Duration: 12 * time.Second, Seed: 1, QueryRate: 5, ChurnInterval: 5 * time.Second, ChurnFraction: 0.25})
		checkRun(t, rep, 0.9, 0.05)
	})
}

// checkRun asserts what every healthy run shows.
func checkRun(t *testing.T, rep *Report, minRecall, maxStale float64) {
	t.Helper()
	if f := rep.Check(Thresholds{MinRecall: minRecall, MaxStale: maxStale}); len(f) > 0 {
		t.Errorf("thresholds: %v", f)
	}
	if !rep.Setup.Converged {
		t.Error("the warm-up did not converge")
	}
	if rep.Queries.Scored < 20 {
		t.Errorf("only %d scored queries", rep.Queries.Scored)
	}
	if rep.Queries.Unknown > 0 {
		t.Errorf("%d results name agents that do not exist or do not match", rep.Queries.Unknown)
	}
	if rep.Traffic.MsgsPerNodeS <= 0 || rep.Traffic.ByProtocol["gossip"].MsgsPerS <= 0 || rep.Traffic.ByProtocol["dht"].MsgsPerS <= 0 {
		t.Errorf("traffic not measured: %+v", rep.Traffic)
	}
	// What GossipSub received: each copy is a first copy, a duplicate, a
	// refused one or (a topic the node left) dropped unseen; a run with
	// heartbeats delivers some and, with a mesh of more than one peer,
	// drops some as duplicates. A copy is counted when its RPC arrives and
	// its fate when validation ends, so a copy still in validation as the
	// window opens has its fate counted in the window and its arrival
	// before it: a few dozen such copies at most, against thousands,
	// hence the 0.5 % allowance.
	if m := rep.Gossip.PubsubIn; m == nil || m.RPCs <= 0 || m.First <= 0 || m.Duplicates <= 0 || m.First+m.Duplicates+m.Ignored+m.Failed+m.Unvalidated+m.OtherRefused > m.Copies*1.005 {
		t.Errorf("pubsub receptions not split: %+v", m)
	}
	if rep.Resources.Samples == 0 || rep.Resources.GoroutinesPerNode <= 0 || rep.Resources.HeapPerNodeMB <= 0 {
		t.Errorf("resources not sampled: %+v", rep.Resources)
	}
	// Every connected peer is counted once: protected, young or other;
	// a node's own agents' peers are in its view and kept.
	c := rep.Resources.Conns
	if sum := c.Protected + c.Young + c.Other; math.Abs(sum-rep.Resources.PeersPerNode) > 1e-6 || c.View <= 0 || c.MeshOnly > c.Protected {
		t.Errorf("connections split %+v; %.2f peers per node", c, rep.Resources.PeersPerNode)
	}
	if len(rep.Timeline) == 0 || rep.Timeline[0].Live == 0 {
		t.Errorf("timeline: %+v", rep.Timeline)
	}
}

// TestPartitionScenario splits 16 nodes for 45 s and heals. The split
// outlasts the 30 s liveness timeout by more than a heartbeat interval, so
// every node must drop the far half's agents before the heal: a split of
// exactly the timeout left that to the scheduling of the last heartbeats
// (the far agents lived on in ~1 run of 10 under load).
func TestPartitionScenario(t *testing.T) {
	skipUnderRace(t)
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Kind: KindPartition, Nodes: 16, Duration: 100 * time.Second, PartitionAt: 20 * time.Second, PartitionFor: 45 * time.Second, Seed: 3, QueryRate: 10})
		q := rep.Queries
		// During the split half the providers are out of reach: scored
		// against every live provider, recall drops; against the reachable
		// ones, it does not.
		if q.ExpectedAll <= q.Expected || q.RecallAllLive >= q.Recall {
			t.Errorf("partition invisible in the score: %+v", q)
		}
		if q.Recall < 0.9 {
			t.Errorf("recall among reachable providers %.3f", q.Recall)
		}
		var kinds []EventKind
		for _, m := range rep.Marks {
			kinds = append(kinds, m.Kind)
		}
		if !reflect.DeepEqual(kinds, []EventKind{EventPartition, EventHeal}) {
			t.Errorf("events %v", kinds)
		}
		if len(rep.Churn.Reconverge) != 1 || rep.Churn.Reconverge[0].Event != EventHeal {
			t.Fatalf("no reconvergence measure after the heal: %+v", rep.Churn.Reconverge)
		}
		// Both halves dropped the far side at once (early detection);
		// its agents must come back with their first heartbeats after the
		// heal, not after a dial retry or a re-announcement.
		if s := rep.Churn.Reconverge[0].S; s < 0 || s > 10 {
			t.Errorf("views complete %v s after the heal, want ≤ 10 s (a heartbeat interval and reconnection)", s)
		}
	})
}

// TestMassJoinScenario adds 20 nodes at once to 10.
func TestMassJoinScenario(t *testing.T) {
	skipUnderRace(t)
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Kind: KindMassJoin, Nodes: 10, MassJoin: 20, MassJoinAt: 5 * time.Second, Duration: 35 * time.Second, Seed: 4, QueryRate: 10})
		checkRun(t, rep, 0.95, 0.02)
		if rep.Churn.Joined != 20 || rep.Churn.JoinToVisible.Count+int64(rep.Churn.JoinUnresolved) != 20 {
			t.Errorf("mass join: %+v", rep.Churn)
		}
		if last := rep.Timeline[len(rep.Timeline)-1]; last.Live != 30 {
			t.Errorf("%d live nodes at the end, want 30", last.Live)
		}
		if len(rep.Churn.Reconverge) != 1 || rep.Churn.Reconverge[0].S < 0 {
			t.Errorf("views did not become complete after the mass join: %+v", rep.Churn.Reconverge)
		}
	})
}

// TestRunIsRepeatable: the same seed gives the same network history (who
// leaves, crashes, restarts and joins when), even though goroutine
// scheduling varies.
func TestRunIsRepeatable(t *testing.T) {
	skipUnderRace(t)
	run := func() *Report {
		var rep *Report
		bubble(t, func(t *testing.T) {
			rep = runScenario(t, Scenario{Nodes: 6, Duration: 25 * time.Second, ChurnInterval: 5 * time.Second, ChurnFraction: 0.34, Seed: 9, QueryRate: 4})
		})
		return rep
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a.Marks, b.Marks) {
		t.Fatalf("event histories differ:\n%v\n%v", a.Marks, b.Marks)
	}
	ca, cb := a.Churn, b.Churn
	if ca.Left != cb.Left || ca.Crashed != cb.Crashed || ca.Joined != cb.Joined || ca.Restarted != cb.Restarted || ca.Restarted == 0 {
		t.Fatalf("churn differs or never restarted: %+v vs %+v", ca, cb)
	}
	if a.Queries.Scheduled != b.Queries.Scheduled || a.Queries.Issued != b.Queries.Issued {
		t.Fatalf("queries differ: %d/%d vs %d/%d", a.Queries.Scheduled, a.Queries.Issued, b.Queries.Scheduled, b.Queries.Issued)
	}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmokeSybil is the small sybil run of `make test` (issue 12 item 1):
// 10 honest nodes, one hostile peer announcing 1 000 fake agents at 200/s
// with one-day interval claims. The per-peer quota holds, the honest
// nodes' heartbeat interval does not move, every default-limit answer
// holds every honest agent, and the fakes leave once the peer is gone.
// Without the quota (MaxAgentsPerPeer 1<<20) 997 fakes got into each view,
// honest intervals stretched to 10 s and 373 fakes outlived the run.
func TestSmokeSybil(t *testing.T) {
	skipUnderRace(t)
	bubble(t, func(t *testing.T) {
		rep := runScenario(t, Scenario{Kind: KindSybil, Nodes: 10, Duration: 90 * time.Second, Seed: 1, QueryRate: 5,
			SybilAgents: 1000, SybilRate: 200, SybilAt: 5 * time.Second})
		// Not checkRun: answers naming agents that do not exist are the
		// admitted fakes, expected here.
		if f := rep.Check(Thresholds{MinRecall: 0.999, MaxStale: 0.01}); len(f) > 0 {
			t.Errorf("thresholds: %v", f)
		}
		if !rep.Setup.Converged || rep.Queries.Scored < 20 {
			t.Errorf("converged %v, %d queries scored", rep.Setup.Converged, rep.Queries.Scored)
		}
		y := rep.Sybil
		if y == nil {
			t.Fatal("no sybil section")
		}
		if y.Published != 1000 || y.MaxAdmitted == 0 || y.MaxAdmitted > SybilMaxAdmitted {
			t.Errorf("published %d, at most %d admitted per node: want 1000 and 1..%d", y.Published, y.MaxAdmitted, SybilMaxAdmitted)
		}
		if y.Refused["gossip/peer_quota"] == 0 {
			t.Errorf("refusals not counted: %v", y.Refused)
		}
		if y.IntervalBeforeS == 0 || y.IntervalMaxS != y.IntervalBeforeS {
			t.Errorf("honest heartbeat interval %gs before the flood, at most %gs during: want the same, sampled", y.IntervalBeforeS, y.IntervalMaxS)
		}
		// No fake is judged by its one-day claim. (How many claims reach a
		// view to be clamped depends on timing: a fake's beat that arrives
		// before its record is refused as unknown_key, and in 1 run in 15
		// none came later. The clamp itself: view.TestClaimedIntervalIsBounded.)
		if y.FakeIntervalOver > 0 || y.FakeIntervalMaxS == 0 || y.FakeIntervalMaxS > y.FakeIntervalBoundS {
			t.Errorf("fakes judged by up to %gs (bound %gs, %d samples over it)", y.FakeIntervalMaxS, y.FakeIntervalBoundS, y.FakeIntervalOver)
		}
		if y.MinScore >= 0 {
			t.Errorf("the flooding peer's gossip score stayed at %v", y.MinScore)
		}
	})
}
