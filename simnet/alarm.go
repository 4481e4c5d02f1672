package simnet

import (
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
	a.q.push(alarmEntry{at: t, ch: ch})
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
			e := a.q.pop()
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

// alarmHeap is a min-heap of alarms by time. It is typed rather than a
// container/heap.Interface: boxing each entry into an interface value to
// push it allocated once per waiting stream read, 2.5 % of a 100-node
// run's CPU with the collector's assists.
type alarmHeap []alarmEntry

func (h *alarmHeap) push(e alarmEntry) {
	q := append(*h, e)
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].at.Before(q[p].at) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	*h = q
}

// pop removes and returns the earliest alarm; the heap must not be empty.
func (h *alarmHeap) pop() alarmEntry {
	q := *h
	e := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = alarmEntry{}
	q = q[:n]
	for i := 0; ; {
		m := 2*i + 1
		if m >= n {
			break
		}
		if r := m + 1; r < n && q[r].at.Before(q[m].at) {
			m = r
		}
		if !q[m].at.Before(q[i].at) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return e
}
