package simnet

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The alarm wakes each waiter at its time, earliest first, whatever the
// order they were set in; close drops what is not due.
func TestAlarm(t *testing.T) {
	bubble(t, func(t *testing.T) {
		a := newAlarm()
		start := time.Now()
		chans := make([]chan struct{}, 3)
		for i := range chans {
			chans[i] = make(chan struct{}, 1)
		}
		a.at(start.Add(30*time.Millisecond), chans[2])
		a.at(start.Add(10*time.Millisecond), chans[0])
		a.at(start.Add(20*time.Millisecond), chans[1])
		for i, ch := range chans {
			<-ch
			if got, want := time.Since(start), time.Duration(i+1)*10*time.Millisecond; got != want {
				t.Errorf("waiter %d woke after %v, want %v", i, got, want)
			}
		}
		// Past times fire at once.
		a.at(start, chans[0])
		<-chans[0]
		late := make(chan struct{}, 1)
		a.at(time.Now().Add(time.Hour), late)
		a.close()
		a.close()
		time.Sleep(2 * time.Hour)
		select {
		case <-late:
			t.Error("an alarm fired after close")
		default:
		}
	})
}

// TestAlarmHeap: alarms come out in time order, and pushing and popping
// allocate nothing once the heap has room.
func TestAlarmHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Unix(1_700_000_000, 0)
	var h alarmHeap
	for range 1000 {
		h.push(alarmEntry{at: base.Add(time.Duration(r.IntN(500)) * time.Millisecond)})
	}
	prev := time.Time{}
	for len(h) > 0 {
		e := h.pop()
		if e.at.Before(prev) {
			t.Fatalf("popped %v after %v", e.at, prev)
		}
		prev = e.at
	}
	if n := testing.AllocsPerRun(100, func() {
		h.push(alarmEntry{at: base.Add(time.Duration(r.IntN(500)))})
		h.push(alarmEntry{at: base})
		h.pop()
		h.pop()
	}); n != 0 {
		t.Fatalf("%v allocations per push and pop", n)
	}
}
