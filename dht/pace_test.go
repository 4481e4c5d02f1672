package dht

import (
	"slices"
	"testing"
	"time"

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
