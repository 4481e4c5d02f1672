package simnet

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func sk(id string, caps ...string) CatalogSkill { return CatalogSkill{ID: id, Capabilities: caps} }

// world: A and B offer cap.x (A with skill-a, B with skill-b), C offers
// cap.y. A crashes at 10 s and restarts at 100 s; B and C live throughout.
func world() *truth {
	tr := newTruth(30 * time.Second)
	tr.up("A", 1, []CatalogSkill{sk("skill-a", "cap.x")}, at(0))
	tr.up("B", 2, []CatalogSkill{sk("skill-b", "cap.x", "cap.z")}, at(0))
	tr.up("C", 3, []CatalogSkill{sk("skill-c", "cap.y")}, at(0))
	tr.down("A", at(10))
	tr.up("A", 1, []CatalogSkill{sk("skill-a", "cap.x")}, at(100))
	return tr
}

func TestScoreRecall(t *testing.T) {
	tr := world()
	q := Query{Capability: "cap.x"}
	o, hits := tr.score(q, 3, at(5), []Returned{{AgentID: "A"}})
	if o.Expected != 2 || o.Found != 1 || o.Recall() != 0.5 || o.Returned != 1 || o.Live != 1 || len(hits) != 0 {
		t.Fatalf("half found: %+v", o)
	}
	o, _ = tr.score(q, 3, at(5), []Returned{{AgentID: "B"}, {AgentID: "A"}, {AgentID: "B"}})
	if o.Found != 2 || o.Returned != 2 || o.Recall() != 1 {
		t.Fatalf("duplicates count once: %+v", o)
	}
	// A skill filter narrows the providers.
	o, _ = tr.score(Query{Skill: "skill-b", Capability: "cap.x"}, 3, at(5), []Returned{{AgentID: "B"}})
	if o.Expected != 1 || o.Found != 1 {
		t.Fatalf("skill query: %+v", o)
	}
	// Nothing expected: recall is not defined, Recall reports 1.
	o, _ = tr.score(Query{Capability: "cap.none"}, 3, at(5), nil)
	if o.Expected != 0 || o.Recall() != 1 || o.StaleRate() != 0 {
		t.Fatalf("no provider: %+v", o)
	}
}

func TestScoreStaleness(t *testing.T) {
	tr := world()
	q := Query{Capability: "cap.x"}
	// 20 s after A's crash: dead, but within the liveness timeout.
	o, hits := tr.score(q, 3, at(30), []Returned{{AgentID: "A"}, {AgentID: "B"}})
	if o.Expected != 1 || o.Found != 1 || o.DeadRecent != 1 || o.Stale != 0 || len(hits) != 0 {
		t.Fatalf("dead within timeout: %+v", o)
	}
	// 40 s after: stale; one flagged by the resolver.
	o, hits = tr.score(q, 3, at(50), []Returned{{AgentID: "A", Source: "gossip"}, {AgentID: "B"}})
	if o.Stale != 1 || o.StaleFlagged != 0 || o.Returned != 2 || o.StaleRate() != 0.5 {
		t.Fatalf("stale: %+v", o)
	}
	if len(hits) != 1 || hits[0].source != "gossip" || hits[0].deadFor != 40*time.Second {
		t.Fatalf("stale hit: %+v", hits)
	}
	o, _ = tr.score(q, 3, at(50), []Returned{{AgentID: "A", Stale: true}})
	if o.Stale != 1 || o.StaleFlagged != 1 {
		t.Fatalf("flagged stale: %+v", o)
	}
	// Exactly at the threshold is not stale yet.
	o, _ = tr.score(q, 3, at(40), []Returned{{AgentID: "A"}})
	if o.Stale != 0 || o.DeadRecent != 1 {
		t.Fatalf("at the threshold: %+v", o)
	}
	// After the restart A is live again.
	o, _ = tr.score(q, 3, at(110), []Returned{{AgentID: "A"}, {AgentID: "B"}})
	if o.Expected != 2 || o.Found != 2 || o.Stale != 0 {
		t.Fatalf("restarted: %+v", o)
	}
	// Truth is taken at the query's time: a query issued at 50 s is scored
	// against the dead A even if scored later.
	if tr.isLive("A", at(50)) || !tr.isLive("A", at(100)) || !tr.isLive("B", at(50)) {
		t.Fatal("isLive")
	}
}

func TestScoreOddities(t *testing.T) {
	tr := world()
	o, _ := tr.score(Query{Capability: "cap.x"}, 3, at(5), []Returned{{AgentID: "nobody"}, {AgentID: "C"}})
	// "nobody" never registered; C is live but does not offer cap.x.
	if o.Unknown != 2 || o.Found != 0 || o.Returned != 2 {
		t.Fatalf("unknown and wrong answers: %+v", o)
	}
	// An agent that registered after the query was issued is live, not
	// stale.
	tr.up("D", 4, []CatalogSkill{sk("skill-d", "cap.x")}, at(200))
	o, _ = tr.score(Query{Capability: "cap.x"}, 3, at(150), []Returned{{AgentID: "D"}})
	if o.Live != 1 || o.Stale != 0 || o.Found != 0 {
		t.Fatalf("registered later: %+v", o)
	}
}

func TestScorePartition(t *testing.T) {
	tr := world()
	// Nodes 1 and 3 on side 0, node 2 (B) on side 1, from 20 s to 50 s.
	tr.partition(at(20), map[int]int{2: 1})
	tr.heal(at(50))
	q := Query{Capability: "cap.x"}
	o, _ := tr.score(q, 3, at(30), []Returned{{AgentID: "B"}})
	if o.Expected != 0 || o.ExpectedAll != 1 || o.FoundAll != 1 || o.Unreachable != 1 || o.Found != 0 {
		t.Fatalf("across the partition: %+v", o)
	}
	o, _ = tr.score(q, 2, at(30), []Returned{{AgentID: "B"}})
	if o.Expected != 1 || o.Found != 1 || o.Unreachable != 0 {
		t.Fatalf("same side: %+v", o)
	}
	o, _ = tr.score(q, 3, at(60), []Returned{{AgentID: "B"}})
	if o.Expected != 1 || o.Found != 1 {
		t.Fatalf("after the heal: %+v", o)
	}
	var sum Outcome
	sum.add(o)
	sum.add(o)
	if sum.Found != 2 || sum.Expected != 2 || sum.Returned != 2 {
		t.Fatalf("add: %+v", sum)
	}
}
