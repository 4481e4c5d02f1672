package dht

import (
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"golang.org/x/time/rate"
)

func TestPutQueueOrder(t *testing.T) {
	q := newPutQueue()
	for _, k := range []string{"a", "b", "c"} {
		q.push(k, false)
	}
	q.push("a", false) // queued once
	q.push("d", true)
	q.push("c", true) // moves ahead of the round
	q.push("d", false)
	var got []string
	for {
		k, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, k)
	}
	if want := []string{"d", "c", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if q.len() != 0 || q.urgent != nil || q.routine != nil {
		t.Fatalf("drained queue holds %d, %v, %v", q.len(), q.urgent, q.routine)
	}
	q.push("x", false)
	q.push("y", true)
	if q.routineLen() != 1 || q.len() != 2 {
		t.Fatalf("routine %d of %d", q.routineLen(), q.len())
	}
}

// Value puts take turns from a rate limiter: with a burst of 3 and a rate
// of one an hour, exactly three of twenty hosted records are put and the
// rest wait their turn (no clock involved: the next turn is an hour away).
func TestValuePutsArePaced(t *testing.T) {
	c := newCluster(t, 3, 0, func(i int, cfg *Config) {
		if i == 1 {
			cfg.ValuePutRate, cfg.ValuePutBurst = rate.Every(time.Hour), 3
		}
	})
	prov := c.nodes[1]
	var recs []*record.SignedAgent
	for i := range 20 {
		id := mustIdentity(t)
		recs = append(recs, signedAgent(t, id, uint64(i+1), skillSpec{"skill-p": {"cap-p"}}))
	}
	prov.hosted.set(recs)
	prov.d.SetProvided(recs)
	eventually(t, 20*time.Second, "three puts done", func() bool {
		return counterValue(prov.m.ValuePuts.WithLabelValues("ok")) == 3
	})
	st := prov.d.Status()
	if st.PublishedValues != 20 || st.QueuedPuts != 17 {
		t.Fatalf("status %+v: want 20 values kept, 17 waiting for their turn", st)
	}
	// The node's other work goes on: its keys are provided meanwhile.
	eventually(t, 20*time.Second, "keys provided", func() bool { return prov.d.Status().ProvidedKeys == 3 })
	if got := counterValue(prov.m.ValuePuts.WithLabelValues("ok")); got != 3 {
		t.Fatalf("%v puts done; the limiter allows 3", got)
	}
}

// Queued puts leave in bursts of ValuePutBurst once the limiter has that
// many turns, not one at each turn: a put wakes the loop, a goroutine and
// the connection's readers, and at 50 puts a second one at a time that
// cost twice the CPU (docs/performance.md, "The DHT's upkeep"). Virtual
// time: 20 values at 10 a second in bursts of 5 finish in a few groups
// half a second apart, where one put per turn (a tenth of a second apart)
// makes one stream.
func TestValuePutsLeaveInBursts(t *testing.T) {
	synctestTest(t, func(t *testing.T) {
		c := newCluster(t, 3, 10*time.Millisecond, func(i int, cfg *Config) {
			if i == 1 {
				cfg.ValuePutRate, cfg.ValuePutBurst = 10, 5
			}
		})
		prov := c.nodes[1]
		var recs []*record.SignedAgent
		for i := range 20 {
			id := mustIdentity(t)
			recs = append(recs, signedAgent(t, id, uint64(i+1), skillSpec{"skill-p": {"cap-p"}}))
		}
		puts := func() float64 { return counterValue(prov.m.ValuePuts.WithLabelValues("ok")) }
		prov.hosted.set(recs)
		prov.d.SetProvided(recs)
		// The instants at which puts finished, a millisecond apart at most.
		var done []time.Time
		last := 0.0
		testutil.EventuallyEvery(t, 30*time.Second, time.Millisecond, "20 puts", func() bool {
			if cur := puts(); cur > last {
				done = append(done, time.Now())
				last = cur
			}
			return last >= 20
		})
		// A burst's puts finish within tens of milliseconds (10 ms links);
		// bursts are half a second apart, single turns a tenth.
		groups := 1
		for i := 1; i < len(done); i++ {
			if done[i].Sub(done[i-1]) > 250*time.Millisecond {
				groups++
			}
		}
		if groups < 2 || groups > 4 {
			t.Fatalf("20 puts finished in %d groups at %v, want bursts of 5 or more (the turns saved while a burst ran) half a second apart", groups, done)
		}
	})
}
