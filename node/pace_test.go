package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func registerMany(t *testing.T, nd *tnode, n int) []*record.SignedAgent {
	t.Helper()
	var out []*record.SignedAgent
	for range n {
		a := spec("skill-p", "cap.p")
		a.AgentID = uuid.NewString()
		sa, err := nd.Register(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sa)
	}
	return out
}

// TestHeartbeatsArePaced: a node's heartbeats are spread over the
// interval, not sent in one burst per interval (virtual time: 40 agents,
// a 10 s interval, so 4 a second); and a node nobody listens to sends
// none.
func TestHeartbeatsArePaced(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 2, Config{HeartbeatInterval: 10 * time.Second})
		nd := tn.nodes[1]
		registerMany(t, nd, 40)
		waitFor(t, 5*time.Second, "a listener", func() bool { return nd.gsp.Listened(record.Shard("cap.p")) })
		beats := nd.m.GossipPublished.WithLabelValues(kindHeartbeat)
		prev := promtest.ToFloat64(beats)
		var windows []float64
		for range 30 {
			time.Sleep(time.Second)
			cur := promtest.ToFloat64(beats)
			windows = append(windows, cur-prev)
			prev = cur
		}
		total := 0.0
		for _, w := range windows {
			total += w
		}
		if slices.Max(windows) > 5 || total < 70 || total > 90 {
			t.Fatalf("heartbeats per second over 30 s: %v (total %v), want about 4 every second", windows, total)
		}
		alone := newNet(t, 1, Config{HeartbeatInterval: 10 * time.Second}).nodes[0]
		registerMany(t, alone, 5)
		time.Sleep(30 * time.Second)
		if n := promtest.ToFloat64(alone.m.GossipPublished.WithLabelValues(kindHeartbeat)); n != 0 {
			t.Fatalf("a node without listeners published %v heartbeats", n)
		}
	})
}

// TestRestartResignsInTheBackground: after a restart the stored records are
// served at once and signed again in their heartbeat slots; a
// registration made meanwhile is not overwritten by the background
// re-signing of the record it replaced.
func TestRestartResignsInTheBackground(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 2, Config{HeartbeatInterval: 10 * time.Second})
		nd := tn.nodes[1]
		sas := registerMany(t, nd, 20)
		if err := nd.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		re := tn.add(nd.id, nd.st)
		if got := re.Health(); got.Hosted != 20 || got.Resigning < 19 {
			t.Fatalf("after restart: %d hosted, %d resigning; want 20 hosted, all but the first slot waiting", got.Hosted, got.Resigning)
		}
		for _, sa := range sas {
			if _, ok := re.hostedRecord(sa.Agent.AgentID); !ok {
				t.Fatalf("agent %s not served after restart", sa.Agent.AgentID)
			}
		}
		// Replace the last agent (the last slot) before its slot comes.
		last := sas[len(sas)-1]
		for _, sa := range sas {
			if sa.Agent.AgentID > last.Agent.AgentID {
				last = sa
			}
		}
		a := spec("skill-p", "cap.p", "cap.new")
		a.AgentID = last.Agent.AgentID
		if _, err := re.Register(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "every record re-signed", func() bool { return re.Resigning() == 0 })
		for _, sa := range sas {
			cur, ok := re.hostedRecord(sa.Agent.AgentID)
			if !ok || cur.Agent.Seq <= sa.Agent.Seq {
				t.Fatalf("agent %s not re-signed: %v", sa.Agent.AgentID, ok)
			}
		}
		cur, _ := re.hostedRecord(last.Agent.AgentID)
		if !slices.Contains(cur.Agent.AllCapabilities(), "cap.new") {
			t.Fatalf("the background re-signing wrote back the replaced record: %v", cur.Agent.AllCapabilities())
		}
	})
}

// TestShutdownUnregistersWhatIsHeard: a shutdown unregisters the agents a
// peer listens for, none when nobody listens, and stops when its context
// ends (a node hosting many thousands cannot say them all in time).
func TestShutdownUnregistersWhatIsHeard(t *testing.T) {
	bubble(t, func(t *testing.T) {
		unregs := func(nd *tnode) float64 {
			return promtest.ToFloat64(nd.m.GossipPublished.WithLabelValues(kindUnregister))
		}
		alone := newNet(t, 1, Config{}).nodes[0]
		registerMany(t, alone, 5)
		if err := alone.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := unregs(alone); n != 0 {
			t.Fatalf("a node nobody listens to published %v unregisters", n)
		}

		tn := newNet(t, 2, Config{})
		nd := tn.nodes[1]
		registerMany(t, nd, 5)
		waitFor(t, 5*time.Second, "a listener", func() bool { return nd.gsp.Listened(record.Shard("cap.p")) })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := nd.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if n := unregs(nd); n != 0 {
			t.Fatalf("a shutdown out of time published %v unregisters", n)
		}

		other := newNet(t, 2, Config{}).nodes[1]
		registerMany(t, other, 5)
		waitFor(t, 5*time.Second, "a listener", func() bool { return other.gsp.Listened(record.Shard("cap.p")) })
		if err := other.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := unregs(other); n < 5 {
			t.Fatalf("%v unregisters published for 5 agents heard", n)
		}
	})
}
