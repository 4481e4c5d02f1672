package dht

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// TestLookupLatency measures Find latency over 20 mocknet nodes with 20 ms
// link latency (40 ms RTT): FindProviders on the most specific key, then
// the fetch of each provider's record with its challenge. It is opt-in
// (slow and a measurement, not a check):
//
//	AGENTD_DHT_LATENCY=virtual go test -run TestLookupLatency -v ./dht/   # synctest virtual time: network only
//	AGENTD_DHT_LATENCY=real    go test -run TestLookupLatency -v ./dht/   # wall clock: network + CPU
//
// It still fails if a lookup does not find its provider.
func TestLookupLatency(t *testing.T) {
	mode := os.Getenv("AGENTD_DHT_LATENCY")
	switch mode {
	case "virtual":
		synctestTest(t, func(t *testing.T) { measureLookups(t, mode) })
	case "real":
		measureLookups(t, mode)
	default:
		t.Skip("opt-in measurement: set AGENTD_DHT_LATENCY=virtual or real")
	}
}

func measureLookups(t *testing.T, mode string) {
	const (
		nodes     = 20
		providers = 5
		lookups   = 60
		latency   = 20 * time.Millisecond
	)
	c := newCluster(t, nodes, latency, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	skills := make([]string, providers)
	for i := range providers {
		skills[i] = fmt.Sprintf("skill-%d", i)
		c.nodes[i].host(t, 1, skillSpec{skills[i]: {"cap-" + skills[i]}})
	}
	for i := range providers {
		waitFound(t, c.nodes[nodes-1], skills[i], "cap-"+skills[i], c.nodes[i].id.AgentID)
	}
	var finds, gets []time.Duration
	for range lookups {
		pi := rng.IntN(providers)
		qi := providers + rng.IntN(nodes-providers-1) // never the node used to wait above
		q, p := c.nodes[qi], c.nodes[pi]
		start := time.Now()
		fs, err := q.d.Find(context.Background(), skills[pi], "cap-"+skills[pi], 1)
		finds = append(finds, time.Since(start))
		if err != nil || len(fs) != 1 || fs[0].Provider != p.h.ID() {
			t.Fatalf("lookup of %s from node %d: %v, %v", skills[pi], qi, fs, err)
		}
		start = time.Now()
		sa, err := q.d.GetRecord(context.Background(), p.id.AgentID)
		gets = append(gets, time.Since(start))
		if err != nil || sa.Agent.AgentID != p.id.AgentID {
			t.Fatalf("GetRecord of %s from node %d: %v", p.id.AgentID, qi, err)
		}
	}
	t.Logf("RESULT dht latency (%s time), %d nodes, %v link latency (%v RTT), %d lookups each: Find %s; GetRecord %s",
		mode, nodes, latency, 2*latency, lookups, pct(finds), pct(gets))
}

func pct(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v p95 %v max %v", at(0.50), at(0.95), s[len(s)-1].Round(time.Millisecond))
}
