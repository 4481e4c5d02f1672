package view

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
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
