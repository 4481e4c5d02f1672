package gossip

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkPropagation20 measures, in wall-clock time, how long an
// announcement takes to reach each of 19 other nodes (mocknet, 20 ms
// links, sparse random topology), including signing, validation and
// signature checks. One b.N iteration is one announcement.
//
//	go test -run '^$' -bench BenchmarkPropagation20 -benchtime 20x ./gossip
func BenchmarkPropagation20(b *testing.B) {
	const n = 20
	tn := newTestNetLevel(b, n, testConfig(), slog.LevelError)
	tn.connectSparse(3, 1)
	tn.waitTopicPeers(1)
	tn.waitMesh()
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		pub := tn.nodes[i%n]
		sa := pub.record(b)
		t0 := time.Now()
		if err := pub.g.PublishAnnounce(context.Background(), sa); err != nil {
			b.Fatal(err)
		}
		for _, nd := range tn.nodes {
			if nd == pub {
				continue
			}
			waitFor(b, 10*time.Second, "announcement", func() bool { return len(nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)) > 0 })
			lat = append(lat, nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)[0].at.Sub(t0))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(percentile(lat, 100).Microseconds())/1000, "max-ms")
}
