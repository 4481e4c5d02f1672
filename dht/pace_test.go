package dht

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

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

// A node alone has every value's put fail: once all have, one flag says so
// instead of an entry per value (85 bytes a record for a registry loading
// 100 000 before any peer joins), and the retry puts them all. Some failed
// out of many keep an entry each, and only they are put again.
func TestEveryValueFailedIsOneFlag(t *testing.T) {
	var cfg Config
	cfg.setDefaults()
	st := newLoopState(cfg)
	const n = 1000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%d", i)
		st.values[ids[i]] = value{}
	}
	for _, id := range ids[:10] {
		st.valueFailed(id)
	}
	if st.failAll || len(st.failValues) != 10 || st.failedValues() != 10 {
		t.Fatalf("10 of %d failed: failAll %v, %d entries, %d pending", n, st.failAll, len(st.failValues), st.failedValues())
	}
	d := &DHT{}
	d.retryFailed(context.Background(), st)
	if st.puts.len() != 10 {
		t.Fatalf("retry queued %d puts, want the 10 that failed", st.puts.len())
	}
	for st.puts.len() > 0 {
		st.puts.pop()
	}
	for _, id := range ids {
		st.valueFailed(id)
		st.valueFailed(id) // failed again: counted once
	}
	if !st.failAll || len(st.failValues) != 0 || st.failedValues() != n {
		t.Fatalf("all %d failed: failAll %v, %d entries, %d pending", n, st.failAll, len(st.failValues), st.failedValues())
	}
	delete(st.values, ids[0]) // unregistered meanwhile: not put again
	d.retryFailed(context.Background(), st)
	if st.failAll || st.failedValues() != 0 || st.puts.len() != n-1 {
		t.Fatalf("after the retry: failAll %v, %d pending, %d queued, want %d queued", st.failAll, st.failedValues(), st.puts.len(), n-1)
	}
}

// The loop holds a value per hosted agent: its record and when it was last
// put, named by the map's key (a 100 000-record registry's map was 40-byte
// values keyed by a string of their own).
func TestValueSize(t *testing.T) {
	if n := unsafe.Sizeof(value{}); n > 16 {
		t.Fatalf("value is %d bytes, want at most 16", n)
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
