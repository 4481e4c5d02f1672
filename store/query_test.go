package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// queryFixture fills a store with a small, varied population.
type queryFixture struct {
	s   *db
	clk *clock
	// named records
	search, crm, legacy, ops, staleOne *record.SignedAgent
}

func newQueryFixture(t *testing.T, dir string) *queryFixture {
	t.Helper()
	ctx := context.Background()
	clk := newClock()
	f := &queryFixture{clk: clk}
	f.s = openTest(t, dir, Options{Now: clk.Now, CacheTTL: time.Hour})
	f.search = mkRecord(t, agentSpec{issued: clk.Now(), name: "searcher", version: "2.1.0", tags: []string{"prod", "eu"}, tenant: "acme",
		skills: []record.Skill{
			skill("web-search", "1.4.0", record.SkillTool, []string{"research"}, "search", "rank"),
			skill("summarize", "3.0.0", record.SkillIntegration, []string{"research", "writing"}, "summarize"),
		}})
	f.crm = mkRecord(t, agentSpec{issued: clk.Now(), name: "crm", version: "1.0.0", tags: []string{"prod"}, tenant: "globex",
		skills: []record.Skill{skill("crm-sync", "2.0.0", record.SkillEnterprise, []string{"sales"}, "contacts", "search")}})
	// A seed-000 agent: capabilities only in the agent-level map.
	f.legacy = mkRecord(t, agentSpec{issued: clk.Now(), version: "0.9.0", tags: []string{"dev"}, skills: []record.Skill{},
		agentCap: map[string]string{"search": "0.5.0", "translate": "1.2.0"}})
	f.ops = mkRecord(t, agentSpec{issued: clk.Now(), name: "ops", tags: []string{"prod", "eu"},
		skills: []record.Skill{skill("deploy", "1.9.9", record.SkillTool, []string{"ops"}, "deploy", "rollback")}})
	// Expires after 10 minutes (its own TTL), stays in the grace window.
	f.staleOne = mkRecord(t, agentSpec{issued: clk.Now(), ttl: 10 * time.Minute, tags: []string{"prod"},
		skills: []record.Skill{skill("web-search", "1.5.0", record.SkillTool, nil, "search")}})
	for i, sa := range []*record.SignedAgent{f.search, f.crm, f.legacy, f.ops, f.staleOne} {
		src := []Source{SourceGossip, SourceDHT, SourceLAN, SourceGossip, SourceDHT}[i]
		if err := f.s.Put(ctx, Entry{Record: sa, Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(11 * time.Minute)
	return f
}

func sortedIDs(sas ...*record.SignedAgent) []string {
	out := make([]string, len(sas))
	for i, sa := range sas {
		out[i] = sa.Agent.AgentID
	}
	slices.Sort(out)
	return out
}

func TestQueryFilters(t *testing.T) {
	modes(t, func(t *testing.T, dir func() string) {
		ctx := context.Background()
		fx := newQueryFixture(t, dir())
		cases := []struct {
			name string
			f    Filter
			want []string // in result order
		}{
			{"all fresh", Filter{}, sortedIDs(fx.search, fx.crm, fx.legacy, fx.ops)},
			{"capability in skills and agent map", Filter{Capability: "search"}, sortedIDs(fx.search, fx.crm, fx.legacy)},
			{"capability only in agent map", Filter{Capability: "translate"}, sortedIDs(fx.legacy)},
			{"skill", Filter{Skill: "web-search"}, sortedIDs(fx.search)},
			{"scene", Filter{Scene: "research"}, sortedIDs(fx.search)},
			{"type", Filter{Type: string(record.SkillEnterprise)}, sortedIDs(fx.crm)},
			{"tags AND", Filter{Tags: []string{"prod", "eu"}}, sortedIDs(fx.search, fx.ops)},
			{"tenant", Filter{Tenant: "acme"}, sortedIDs(fx.search)},
			{"agent id", Filter{AgentID: fx.crm.Agent.AgentID}, sortedIDs(fx.crm)},
			{"agent id and wrong tag", Filter{AgentID: fx.crm.Agent.AgentID, Tags: []string{"dev"}}, nil},
			{"text", Filter{Text: "ROLLB"}, sortedIDs(fx.ops)},
			{"sources", Filter{Sources: []Source{SourceGossip}}, sortedIDs(fx.search, fx.ops)},
			{"scene and capability on one skill", Filter{Scene: "writing", Capability: "summarize"}, sortedIDs(fx.search)},
			{"scene and capability on different skills", Filter{Scene: "writing", Capability: "rank"}, nil},
			{"unknown capability", Filter{Capability: "teleport"}, nil},
			// Version applies to the matching skill when Capability is given:
			// web-search 1.4.0, crm-sync 2.0.0, legacy map 0.5.0.
			{"capability + version", Filter{Capability: "search", Version: ">=1.0.0 <2"}, sortedIDs(fx.search)},
			{"capability + version map", Filter{Capability: "search", Version: "<1"}, sortedIDs(fx.legacy)},
			{"skill + version", Filter{Skill: "summarize", Version: "^3"}, sortedIDs(fx.search)},
			{"skill + version miss", Filter{Skill: "summarize", Version: "^2"}, nil},
			// Without skill or capability: the agent version or any skill's.
			{"version agent or skill", Filter{Version: "~1.9"}, sortedIDs(fx.ops)},
			{"version agent", Filter{Version: "=2.1.0"}, sortedIDs(fx.search)},
			{"capability + tag + version", Filter{Capability: "search", Tags: []string{"prod"}, Version: ">=2"}, sortedIDs(fx.crm)},
		}
		for _, c := range cases {
			got, err := fx.s.Query(ctx, c.f)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			if !slices.Equal(ids(got), c.want) {
				t.Errorf("%s: got %v, want %v", c.name, ids(got), c.want)
			}
		}
	})
}

func TestQueryStaleOrderAndLimit(t *testing.T) {
	ctx := context.Background()
	fx := newQueryFixture(t, "")
	got, err := fx.s.Query(ctx, Filter{Capability: "search", IncludeStale: true})
	if err != nil {
		t.Fatal(err)
	}
	want := append(sortedIDs(fx.search, fx.crm, fx.legacy), fx.staleOne.Agent.AgentID)
	if !slices.Equal(ids(got), want) {
		t.Fatalf("fresh then stale: got %v, want %v", ids(got), want)
	}
	if !got[3].Stale || got[0].Stale {
		t.Fatal("Stale flags wrong")
	}
	for limit := 1; limit <= 5; limit++ {
		got, err := fx.s.Query(ctx, Filter{Capability: "search", IncludeStale: true, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), want[:min(limit, len(want))]) {
			t.Fatalf("limit %d: got %v", limit, ids(got))
		}
	}
	// The stale entry matches the skill filter only with IncludeStale.
	if got, _ := fx.s.Query(ctx, Filter{Skill: "web-search", Version: "1.5.0"}); len(got) != 0 {
		t.Fatalf("stale without IncludeStale: %v", ids(got))
	}
	if got, _ := fx.s.Query(ctx, Filter{Skill: "web-search", Version: "1.5.0", IncludeStale: true}); len(got) != 1 {
		t.Fatalf("stale with IncludeStale: %v", ids(got))
	}
}

func TestQueryRefusesBadFilters(t *testing.T) {
	ctx := context.Background()
	fx := newQueryFixture(t, "")
	long := string(make([]byte, 200))
	cases := []struct {
		f     Filter
		field string
	}{
		{Filter{Version: ">=banana"}, "version"},
		{Filter{Capability: "search", Version: "1.2.3 ||| <"}, "version"},
		{Filter{Capability: "a\x00b"}, "capability"},
		{Filter{Skill: long}, "skill"},
		{Filter{Tags: []string{"ok", "bad\n"}}, "tags[1]"},
		{Filter{Tenant: "\xff"}, "tenant"},
		{Filter{Limit: -1}, "limit"},
		{Filter{Text: long + long}, "text"},
	}
	for _, c := range cases {
		_, err := fx.s.Query(ctx, c.f)
		if got := record.FieldOf(err); got != c.field {
			t.Errorf("%+v: error %v names %q, want %q", c.f, err, got, c.field)
		}
	}
}

// TestQueryPicksSelectiveIndex checks the planner: with one rare and one
// common term, the candidates are the rare term's postings.
func TestQueryPicksSelectiveIndex(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, "", Options{Now: clk.Now})
	var rare *record.SignedAgent
	for i := range 20 {
		tags := []string{"common"}
		if i == 7 {
			tags = append(tags, "rare")
		}
		sa := mkRecord(t, agentSpec{issued: clk.Now(), tags: tags})
		if i == 7 {
			rare = sa
		}
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.candidates(ctx, Filter{Tags: []string{"common", "rare"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c, []string{rare.Agent.AgentID}) {
		t.Fatalf("candidates %d, want only the rare one", len(c))
	}
	if c, _ := s.candidates(ctx, Filter{Tags: []string{"common", "absent"}}); len(c) != 0 {
		t.Fatalf("candidates for an absent term: %d", len(c))
	}
}
