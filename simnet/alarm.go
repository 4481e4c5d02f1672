package simnet

import (
	"container/heap"
	"sync"
	"time"
)

// alarm wakes stream readers when what they wait for is due: one timer
// for the whole network instead of one per waiting read. With ~50 000
// deliveries a second (100 nodes in real time) the per-read timers, each
// made, stopped and dropped, kept the runtime's timer heaps busy: in a
// CPU profile of that run the timer upkeep (runtime.(*timers).adjust and
// check) was ~9 % of all samples, a cost no real node has.
type alarm struct {
	mu   sync.Mutex
	q    alarmHeap
	kick chan struct{} // an alarm earlier than the timer's was set
	done chan struct{}
	wg   sync.WaitGroup
}

type alarmEntry struct {
	at time.Time
	ch chan struct{}
}

func newAlarm() *alarm {
	a := &alarm{kick: make(chan struct{}, 1), done: make(chan struct{})}
	a.wg.Go(a.run)
	return a
}

// at makes a non-blocking send on ch at t (at once when t has passed). A
// reader woken for another reason meanwhile finds the send later as a
// spurious wake-up, which its loop absorbs.
func (a *alarm) at(t time.Time, ch chan struct{}) {
	a.mu.Lock()
	first := len(a.q) == 0 || t.Before(a.q[0].at)
	heap.Push(&a.q, alarmEntry{at: t, ch: ch})
	a.mu.Unlock()
	if first {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

func (a *alarm) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		a.mu.Lock()
		now := time.Now()
		for len(a.q) > 0 && !a.q[0].at.After(now) {
			e := heap.Pop(&a.q).(alarmEntry)
			select {
			case e.ch <- struct{}{}:
			default:
			}
		}
		if len(a.q) > 0 {
			t.Reset(a.q[0].at.Sub(now))
		} else {
			t.Stop()
		}
		a.mu.Unlock()
		select {
		case <-a.done:
			return
		case <-a.kick:
		case <-t.C:
		}
	}
}

// close stops the alarm; alarms not yet due are dropped.
func (a *alarm) close() {
	a.mu.Lock()
	select {
	case <-a.done:
	default:
		close(a.done)
	}
	a.q = nil
	a.mu.Unlock()
	a.wg.Wait()
}

// alarmHeap is a min-heap of alarms by time.
type alarmHeap []alarmEntry

func (h alarmHeap) Len() int           { return len(h) }
func (h alarmHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h alarmHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *alarmHeap) Push(x any)        { *h = append(*h, x.(alarmEntry)) }
func (h *alarmHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = alarmEntry{}
	*h = old[:len(old)-1]
	return e
}
