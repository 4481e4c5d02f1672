package dht

import (
	"context"
	"testing"

	"golang.org/x/time/rate"
)

func BenchmarkValidate(b *testing.B) {
	id := mustIdentity(b)
	sa := signedAgent(b, id, 1, skillSpec{"skill-b": {"cap-b"}})
	key, val := ValueKey(id.AgentID), sa.MarshalAnnounce()
	v := Validator{}
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(key, val); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetch is one record fetch between two connected mocknet nodes:
// stream, request, challenge signing, response and full verification.
func BenchmarkFetch(b *testing.B) {
	c := newCluster(b, 2, 0, func(_ int, cfg *Config) { cfg.ServeRateLimit = rate.Inf })
	srv, cli := c.nodes[0], c.nodes[1]
	srv.host(b, 1, skillSpec{"skill-b": {"cap-b"}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		recs, err := cli.d.Fetch(ctx, srv.info(), FetchQuery{Capability: "cap-b"})
		if err != nil || len(recs) != 1 {
			b.Fatal(err)
		}
	}
}
