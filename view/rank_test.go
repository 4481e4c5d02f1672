package view

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// A limited round-robin is the unlimited one cut short: its first limit
// items are the same, whatever the tiers and peers.
func TestRoundRobinLimit(t *testing.T) {
	type item struct {
		tier int
		peer string
		n    int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sameTier := func(a, b item) bool { return a.tier == b.tier }
	peerOf := func(it item) string { return it.peer }
	for round := range 500 {
		items := make([]item, rng.IntN(60))
		tier := 0
		for i := range items {
			if rng.IntN(4) == 0 {
				tier++
			}
			items[i] = item{tier: tier, peer: fmt.Sprint("p", rng.IntN(5)), n: i}
		}
		all := roundRobin(items, sameTier, peerOf, 0)
		if len(all) != len(items) {
			t.Fatalf("round %d: unlimited answer has %d of %d items", round, len(all), len(items))
		}
		for _, limit := range []int{1, 2, 5, 20, 100} {
			got := roundRobin(items, sameTier, peerOf, limit)
			want := all[:min(limit, len(all))]
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, limit %d: %v, want %v", round, limit, got, want)
			}
		}
	}
}

// A limited text query answers the first agents of the unlimited one, in
// the same order, whatever mix of hosted and remote agents, statuses,
// unbound records, peers and tied scores the view holds (the limited one
// may stop reading hits early).
func TestLimitedTextQueryIsAPrefix(t *testing.T) {
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	v := New(Config{}, st, nil, nil, nil)
	defer func() { _ = v.Close() }()
	rng := rand.New(rand.NewPCG(5, 6))
	words := []string{"alpha", "alps", "beta", "gamma", "delta", "alphabet"}
	pick := func() string { return words[rng.IntN(len(words))] }
	for i := range 300 {
		sa := textAgent(fmt.Sprintf("agent-%03d", i), pick()+" "+pick(), pick()+" "+pick()+" "+pick(), []string{pick()}, "cap."+pick())
		switch rng.IntN(4) {
		case 0:
			sa.Agent.PeerID = "" // unbound
		case 1:
			sa.Agent.PeerID = fmt.Sprint("peer-", rng.IntN(3)) // a few peers with many agents
		}
		v.ApplyLocal(sa)
		v.mu.Lock()
		s := v.agents[sa.Agent.AgentID]
		s.local = rng.IntN(3) != 0
		switch rng.IntN(6) {
		case 0:
			s.status = record.StatusDegraded
		case 1:
			s.unhealthy = true
		}
		s.firstSeen = instant(rng.IntN(50)) // ties broken by id
		v.mu.Unlock()
	}
	for _, q := range []string{"alpha", "al", "beta", "gamma delta", "alp beta", "delta"} {
		m, err := (store.Filter{Text: q}).Compile()
		if err != nil {
			t.Fatal(err)
		}
		all := v.Query(m, 0)
		if len(all) == 0 {
			t.Fatalf("q=%q matched nothing", q)
		}
		for _, limit := range []int{1, 3, 10, 20, 50, 400} {
			got := v.Query(m, limit)
			want := all[:min(limit, len(all))]
			if len(got) != len(want) {
				t.Fatalf("q=%q limit %d: %d answers, want %d", q, limit, len(got), len(want))
			}
			for i := range got {
				if got[i].Record.Agent.AgentID != want[i].Record.Agent.AgentID {
					t.Fatalf("q=%q limit %d: answer %d is %s, want %s", q, limit, i, got[i].Record.Agent.AgentID, want[i].Record.Agent.AgentID)
				}
			}
		}
	}
}
