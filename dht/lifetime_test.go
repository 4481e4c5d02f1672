package dht

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// synctestTest runs f in a synctest bubble (virtual time). Under -race it
// pins GOMAXPROCS to 1, as go-libp2p-pubsub's tests do (golang/go#78156).
func synctestTest(t *testing.T, f func(t *testing.T)) {
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

// providersOf runs a full provider lookup for key from n.
func providersOf(t *testing.T, n *node, k record.Key) []peer.ID {
	t.Helper()
	kad, _, err := n.d.running()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []peer.ID
	for ai := range kad.FindProvidersAsync(ctx, k.CID(), 0) {
		out = append(out, ai.ID)
	}
	return out
}

// TestProviderRecordLifetimes checks, in virtual time, that removed keys
// stop being reprovided and vanish from the DHT within ProvideValidity,
// that kept keys survive by reprovide, and that a dead provider is
// forgotten within ProvideValidity (not kad-dht's default 48 h).
func TestProviderRecordLifetimes(t *testing.T) {
	synctestTest(t, func(t *testing.T) {
		// Values with the lifetimes of before (10 min, republished every
		// 3 min), so that several max ages pass within the records' 1 h
		// TTL: the republish round must keep a value alive past them.
		c := newCluster(t, 6, 10*time.Millisecond, func(_ int, c *Config) {
			c.ValueMaxAge, c.RepublishInterval = 10*time.Minute, 3*time.Minute
		})
		prov, dead, q := c.nodes[1], c.nodes[2], c.nodes[4]
		keyA, keyB := record.SkillKey("skill-a", "cap-a"), record.SkillKey("skill-b", "cap-b")
		prov.host(t, 1, skillSpec{"skill-a": {"cap-a"}, "skill-b": {"cap-b"}})
		dead.host(t, 1, skillSpec{"skill-a": {"cap-a"}})
		eventually(t, time.Minute, "both providers visible", func() bool {
			a := providersOf(t, q, keyA)
			return slices.Contains(a, prov.h.ID()) && slices.Contains(a, dead.h.ID()) &&
				slices.Contains(providersOf(t, q, keyB), prov.h.ID())
		})

		// Unregister skill-b (seq 2 without it); kill the other provider.
		prov.host(t, 2, skillSpec{"skill-a": {"cap-a"}})
		if err := dead.d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := dead.h.Close(); err != nil {
			t.Fatal(err)
		}
		// Halfway through the validity everything is still there: the DHT
		// alone cannot tell (Find's fetch does).
		time.Sleep(DefaultProvideValidity / 2)
		if !slices.Contains(providersOf(t, q, keyB), prov.h.ID()) {
			t.Fatal("skill-b provider record vanished before its validity ended")
		}
		// After validity + one reprovide interval: removed and dead are gone,
		// the kept key was reprovided and is still found.
		time.Sleep(DefaultProvideValidity/2 + DefaultReprovideInterval + time.Minute)
		if got := providersOf(t, q, keyB); slices.Contains(got, prov.h.ID()) {
			t.Fatalf("removed key still provided after %v: %v", DefaultProvideValidity, got)
		}
		a := providersOf(t, q, keyA)
		if slices.Contains(a, dead.h.ID()) {
			t.Fatal("dead provider still on the DHT after its validity")
		}
		if !slices.Contains(a, prov.h.ID()) {
			t.Fatal("kept key was not reprovided")
		}
		fs, err := q.d.Find(context.Background(), "skill-a", "cap-a", 0)
		if err != nil || len(fs) != 1 || fs[0].Record.Agent.Seq != 2 {
			t.Fatalf("Find after churn = %+v, %v", fs, err)
		}
		// The value follows the record too: seq 2 is what GetRecord sees,
		// and it is still there after several ValueMaxAge periods.
		since := time.Now()
		testutil.EventuallyEvery(t, 40*time.Minute, 10*time.Second, "three max ages of republish rounds", func() bool {
			return prov.d.Status().LastRepublish.After(since.Add(3 * 10 * time.Minute))
		})
		got, err := q.d.GetRecord(context.Background(), prov.id.AgentID)
		if err != nil || got.Agent.Seq != 2 {
			t.Fatalf("GetRecord after republishes = %v, %v", got, err)
		}
	})
}

// TestRepublishSkipsRecentPuts checks, in virtual time, that the republish
// round puts again only the values not put within the last interval: a
// value put just before a round waits for the next one, and a changed
// record (put at once) is not put again by the round that follows.
func TestRepublishSkipsRecentPuts(t *testing.T) {
	synctestTest(t, func(t *testing.T) {
		const every = 10 * time.Minute
		start := time.Now()
		c := newCluster(t, 3, 10*time.Millisecond, func(_ int, c *Config) {
			c.ValueMaxAge, c.RepublishInterval = 3*every, every
		})
		prov := c.nodes[1]
		puts := func() float64 { return counterValue(prov.m.ValuePuts.WithLabelValues("ok")) }
		// round waits for the republish round due at start + n intervals.
		round := func(n int) {
			t.Helper()
			testutil.EventuallyEvery(t, every+time.Minute, time.Second, fmt.Sprintf("republish round %d", n), func() bool {
				return !prov.d.Status().LastRepublish.Before(start.Add(time.Duration(n) * every))
			})
		}
		// Two values: the record under its agent id and under its peer id.
		prov.host(t, 1, skillSpec{"skill-r": {"cap-r"}})
		eventually(t, time.Minute, "first puts", func() bool { return puts() == 2 })

		// The first round comes less than an interval after that put: it
		// queues nothing.
		round(1)
		if st, got := prov.d.Status(), puts(); got != 2 || st.QueuedPuts != 0 {
			t.Fatalf("%v puts and %d queued after the first round, want 2 and 0: values put less than %v before it were put again", got, st.QueuedPuts, every)
		}
		// The second finds them due.
		round(2)
		eventually(t, time.Minute, "the second round's puts", func() bool { return puts() == 4 })
		// A new seq is put at once, and the next round skips it.
		prov.host(t, 2, skillSpec{"skill-r": {"cap-r"}})
		eventually(t, time.Minute, "changed record put", func() bool { return puts() == 6 })
		round(3)
		if st, got := prov.d.Status(), puts(); got != 6 || st.QueuedPuts != 0 {
			t.Fatalf("%v puts and %d queued after the third round, want 6 and 0", got, st.QueuedPuts)
		}
		got, err := c.nodes[2].d.GetRecord(context.Background(), prov.id.AgentID)
		if err != nil || got.Agent.Seq != 2 {
			t.Fatalf("GetRecord = %v, %v; want seq 2", got, err)
		}
	})
}
