package simnet

import (
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
