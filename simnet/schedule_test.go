package simnet

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
)

func TestPlanIsDeterministicForASeed(t *testing.T) {
	for _, k := range Kinds {
		s := Scenario{Kind: k, Nodes: 100, Duration: 2 * time.Minute, Seed: 7}
		_, cat1, sched1, err := s.Plan()
		if err != nil {
			t.Fatal(err)
		}
		_, cat2, sched2, err := s.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cat1, cat2) || !reflect.DeepEqual(sched1, sched2) {
			t.Fatalf("%s: two plans of seed 7 differ", k)
		}
		s.Seed = 8
		_, cat3, sched3, err := s.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(cat1.Skills, cat3.Skills) || reflect.DeepEqual(sched1, sched3) {
			t.Fatalf("%s: seeds 7 and 8 gave the same plan", k)
		}
	}
}

func TestChurnSchedule(t *testing.T) {
	_, _, sched, err := Scenario{Nodes: 100, Duration: 2 * time.Minute}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	var churn []Event
	for _, e := range sched.Events {
		if e.Kind == EventChurn {
			churn = append(churn, e)
		}
	}
	// Every 10 s strictly inside 2 min: 10 s, 20 s, …, 110 s.
	if len(churn) != 11 {
		t.Fatalf("%d churn events, want 11", len(churn))
	}
	for i, e := range churn {
		if want := time.Duration(i+1) * 10 * time.Second; e.At != want {
			t.Fatalf("churn %d at %s, want %s", i, e.At, want)
		}
		// 10% of 100 leave, half by crash; as many join, half restarts.
		if e.Leave != 5 || e.Crash != 5 || e.Restart != 5 || e.Fresh != 5 {
			t.Fatalf("churn %d: %+v", i, e)
		}
	}
	_, _, sched, err = Scenario{Nodes: 20, Duration: 20 * time.Second, ChurnFraction: 0.25, CrashShare: 1, RestartShare: -1}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	e := sched.Events[slices.IndexFunc(sched.Events, func(e Event) bool { return e.Kind == EventChurn })]
	if e.Leave != 0 || e.Crash != 5 || e.Restart != 0 || e.Fresh != 5 {
		t.Fatalf("all-crash, no-restart churn: %+v", e)
	}
}

func TestPartitionAndMassJoinSchedules(t *testing.T) {
	_, _, sched, err := Scenario{Kind: KindPartition, Nodes: 10, Duration: 2 * time.Minute}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if sched.Count(EventPartition) != 1 || sched.Count(EventHeal) != 1 || sched.Count(EventChurn) != 0 {
		t.Fatalf("partition schedule: %d partitions, %d heals, %d churns", sched.Count(EventPartition), sched.Count(EventHeal), sched.Count(EventChurn))
	}
	for _, e := range sched.Events {
		switch e.Kind {
		case EventPartition:
			if e.At != 30*time.Second {
				t.Fatalf("partition at %s, want a quarter of the run", e.At)
			}
		case EventHeal:
			if e.At != 60*time.Second {
				t.Fatalf("heal at %s, want 30 s after the partition", e.At)
			}
		}
	}
	// A partition that outlasts the run never heals.
	_, _, sched, err = Scenario{Kind: KindPartition, Nodes: 10, Duration: 40 * time.Second}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if sched.Count(EventHeal) != 0 {
		t.Fatal("heal scheduled after the end of the run")
	}
	_, _, sched, err = Scenario{Kind: KindMassJoin, Nodes: 10, Duration: time.Minute, MassJoin: 30}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(sched.Events, func(e Event) bool { return e.Kind == EventMassJoin })
	if i < 0 || sched.Events[i].Fresh != 30 || sched.Events[i].At != 15*time.Second {
		t.Fatalf("mass join: %+v", sched.Events)
	}
	_, _, sched, err = Scenario{Kind: KindSteady, Nodes: 10, Duration: time.Minute}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if sched.Count(EventQuery) != len(sched.Events) {
		t.Fatal("steady schedule has network events")
	}
}

func TestQueriesFollowTheCatalog(t *testing.T) {
	s, cat, sched, err := Scenario{Kind: KindSteady, Nodes: 100, Duration: 10 * time.Minute, QueryRate: 20}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	n := sched.Count(EventQuery)
	// Poisson arrivals: mean rate × duration, within 5 standard deviations.
	mean := s.QueryRate * s.Duration.Seconds()
	if math.Abs(float64(n)-mean) > 5*math.Sqrt(mean) {
		t.Fatalf("%d queries, want about %.0f", n, mean)
	}
	capHits := map[string]int{}
	bySkill := 0
	var last time.Duration
	for _, e := range sched.Events {
		if e.At < last || e.At >= s.Duration {
			t.Fatalf("event at %s out of order or outside the run", e.At)
		}
		last = e.At
		q := e.Query
		if q.Skill == "" {
			if !slices.Contains(cat.Offered, q.Capability) {
				t.Fatalf("query for %s, which no skill offers", q.Capability)
			}
			capHits[q.Capability]++
			continue
		}
		bySkill++
		i := slices.IndexFunc(cat.Skills, func(k CatalogSkill) bool { return k.ID == q.Skill })
		if i < 0 || !slices.Contains(cat.Skills[i].Capabilities, q.Capability) {
			t.Fatalf("query %+v does not match the catalog", q)
		}
	}
	if frac := float64(bySkill) / float64(n); frac < 0.45 || frac > 0.55 {
		t.Fatalf("%.2f of queries by skill, want about half", frac)
	}
	// Zipf: the most popular offered capability is asked far more often
	// than the median one.
	counts := make([]int, 0, len(cat.Offered))
	for _, c := range cat.Offered {
		counts = append(counts, capHits[c])
	}
	top := capHits[cat.Offered[0]]
	slices.Sort(counts)
	if median := counts[len(counts)/2]; top < 5*max(median, 1) {
		t.Fatalf("top capability asked %d times, median %d: not Zipf", top, median)
	}
}

func TestCatalogShape(t *testing.T) {
	cat := NewCatalog(3, 40, 60, 1.2)
	if len(cat.Skills) != 40 || len(cat.Capabilities) != 60 {
		t.Fatalf("catalog %d skills, %d capabilities", len(cat.Skills), len(cat.Capabilities))
	}
	for _, s := range cat.Skills {
		if len(s.Capabilities) < 1 || len(s.Capabilities) > 3 {
			t.Fatalf("skill %s has %d capabilities", s.ID, len(s.Capabilities))
		}
		if len(slices.Compact(slices.Sorted(slices.Values(s.Capabilities)))) != len(s.Capabilities) {
			t.Fatalf("skill %s repeats a capability: %v", s.ID, s.Capabilities)
		}
	}
	r := newRand(3, streamSpec, 1)
	for range 200 {
		skills := cat.pickSkills(r)
		if len(skills) < 1 || len(skills) > 3 {
			t.Fatalf("%d skills drawn", len(skills))
		}
		a := agentSpec(1, skills)
		if err := a.Validate(); err == nil {
			t.Fatal("an unsigned spec validated as a complete record")
		}
		if len(a.Skills) != len(skills) {
			t.Fatalf("spec has %d skills, want %d", len(a.Skills), len(skills))
		}
	}
	// Degenerate sizes still work.
	one := NewCatalog(1, 1, 1, 2)
	if len(one.Skills) != 1 || len(one.Offered) != 1 {
		t.Fatalf("1×1 catalog: %+v", one)
	}
}

func TestIdentityIsDerivedFromTheSeed(t *testing.T) {
	a, err := identityFor(5, 10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := identityFor(5, 10)
	if err != nil {
		t.Fatal(err)
	}
	c, err := identityFor(5, 11)
	if err != nil {
		t.Fatal(err)
	}
	if a.PeerID != b.PeerID || a.AgentID != b.AgentID || !a.AgentKey.Equal(b.AgentKey) {
		t.Fatal("the same seed and index gave two identities")
	}
	if a.PeerID == c.PeerID || a.AgentID == c.AgentID {
		t.Fatal("two indices gave the same identity")
	}
	if got := a.PeerKey.GetPublic(); !got.Equals(b.PeerKey.GetPublic()) {
		t.Fatal("peer keys differ")
	}
}

func TestScenarioValidation(t *testing.T) {
	for _, tc := range []struct {
		s    Scenario
		want string
	}{
		{Scenario{Nodes: 1}, "nodes"},
		{Scenario{Nodes: MaxNodes + 1}, "nodes"},
		{Scenario{Kind: "storm"}, "scenario"},
		{Scenario{Latency: 2 * time.Millisecond, Jitter: 5 * time.Millisecond}, "jitter"},
		{Scenario{Zipf: 1}, "zipf"},
		{Scenario{Zipf: math.NaN()}, "zipf"},
		{Scenario{Bandwidth: -1}, "bandwidth"},
		{Scenario{Bandwidth: 10}, "bandwidth"},
		{Scenario{ConnLow: 50, ConnHigh: 50}, "connection watermarks"},
		{Scenario{ConnLow: 0, ConnHigh: 20}, "connection watermarks"},
		{Scenario{ConnGrace: time.Millisecond}, "connection grace period"},
		{Scenario{ChurnFraction: 0.95}, "churn fraction"},
		{Scenario{QueryRate: math.Inf(1)}, "query rate"},
		{Scenario{Duration: time.Millisecond}, "duration"},
		{Scenario{Kind: KindPartition, Duration: time.Minute, PartitionAt: 2 * time.Minute}, "partition at"},
		{Scenario{Kind: KindMassJoin, MassJoin: MaxNodes}, "mass join"},
		{Scenario{PollInterval: time.Hour}, "poll interval"},
		{Scenario{Node: node.Config{HeartbeatInterval: time.Millisecond}}, "heartbeat interval is 1ms"},
		{Scenario{Node: node.Config{HeartbeatInterval: 25 * time.Hour, Timeout: 25 * time.Hour}}, "heartbeat interval is 25h"},
		{Scenario{Node: node.Config{HeartbeatInterval: time.Minute}}, "liveness timeout is 30s; must be at least the heartbeat interval 1m0s"},
		{Scenario{Node: node.Config{Timeout: 25 * time.Hour}}, "liveness timeout is 25h"},
	} {
		_, _, _, err := tc.s.Plan()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an ErrConfig naming %q", tc.s, err, tc.want)
		}
	}
	// A longer heartbeat with a timeout that fits it is a valid scenario,
	// and its stale threshold follows the timeout.
	s, _, _, err := Scenario{Node: node.Config{HeartbeatInterval: time.Minute, Timeout: 10 * time.Minute}}.Plan()
	if err != nil || s.StaleAfter != 10*time.Minute {
		t.Fatalf("heartbeat 1m, timeout 10m: %v, stale after %s", err, s.StaleAfter)
	}
	// Latency 0 takes no default jitter.
	s, _, _, err = Scenario{NoLatency: true}.Plan()
	if err != nil || s.Latency != 0 || s.Jitter != 0 {
		t.Fatalf("no latency: %v, latency %s jitter %s", err, s.Latency, s.Jitter)
	}
	if s.ConnLow != p2p.DefaultLowWater || s.ConnHigh != p2p.DefaultHighWater || s.ConnGrace != p2p.DefaultConnGrace {
		t.Fatalf("default connection manager %d/%d/%s, want agentd's %d/%d/%s", s.ConnLow, s.ConnHigh, s.ConnGrace, p2p.DefaultLowWater, p2p.DefaultHighWater, p2p.DefaultConnGrace)
	}
	if k, err := ParseKind("massjoin"); err != nil || k != KindMassJoin {
		t.Fatalf("ParseKind: %v %v", k, err)
	}
}
