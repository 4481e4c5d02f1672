package node

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/gossip"
)

// TestHeartbeatTraffic measures the gossip traffic per node per second
// while every node hosts one agent heartbeating with the defaults, for the
// network sizes in $AGENTD_SCALING (e.g. "10,25,50,100"), in virtual time.
// It also runs the largest size with HeartbeatMaxRate lowered, to show the
// adaptive interval bounding the traffic. Figures go to the test log and
// docs/scaling.md:
//
//	AGENTD_SCALING=10,25,50,100 go test -run TestHeartbeatTraffic -v -timeout 30m ./node
func TestHeartbeatTraffic(t *testing.T) {
	sizes := os.Getenv("AGENTD_SCALING")
	if sizes == "" {
		t.Skip("set AGENTD_SCALING=10,25,50 to measure heartbeat traffic (minutes of wall time)")
	}
	var ns []int
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("bad size %q", f)
		}
		ns = append(ns, n)
	}
	t.Logf("%6s %10s %12s %12s %12s %12s %10s", "nodes", "rate-cap", "recv msg/s", "recv B/s", "sent msg/s", "sent B/s", "dup/s")
	for _, n := range ns {
		measureTraffic(t, n, 0)
	}
	measureTraffic(t, ns[len(ns)-1], 2)
}

func measureTraffic(t *testing.T, n int, maxRate float64) {
	t.Run(fmt.Sprintf("n=%d,cap=%g", n, maxRate), func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			counters := make([]*gossip.Traffic, 0, n)
			cfg := Config{HeartbeatMaxRate: maxRate}
			if maxRate == 0 {
				cfg.HeartbeatMaxRate = -1 // keep the base interval: measure the plain default
			}
			tn := newNet(t, 0, cfg)
			for i := 0; i < n; i++ {
				tr := &gossip.Traffic{}
				counters = append(counters, tr)
				tn.cfg.Gossip = withTracer(tr)
				nd := tn.add(nil, nil)
				if _, err := nd.Register(context.Background(), spec(fmt.Sprintf("skill-%d", i), "cap.x")); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(30 * time.Second) // warm-up: mesh, sync, first heartbeats
			before := make([]gossip.TrafficSnapshot, n)
			for i, c := range counters {
				before[i] = c.Snapshot()
			}
			const window = 60 * time.Second
			time.Sleep(window)
			var sum gossip.TrafficSnapshot
			for i, c := range counters {
				d := c.Snapshot().Sub(before[i])
				sum.RecvMessages += d.RecvMessages
				sum.RecvBytes += d.RecvBytes
				sum.SentMessages += d.SentMessages
				sum.SentBytes += d.SentBytes
				sum.Duplicates += d.Duplicates
			}
			per := func(v int64) float64 { return float64(v) / float64(n) / window.Seconds() }
			t.Logf("%6d %10g %12.1f %12.0f %12.1f %12.0f %10.1f", n, maxRate, per(sum.RecvMessages), per(sum.RecvBytes), per(sum.SentMessages), per(sum.SentBytes), per(sum.Duplicates))
		})
	})
}

func withTracer(tr *gossip.Traffic) *gossip.Config {
	gc := gossip.DefaultConfig()
	gc.Tracers = append(gc.Tracers, tr)
	return &gc
}
