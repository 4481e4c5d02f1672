package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelayDoublesToMax(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := Delay(time.Second, 10*time.Second, i, 0); got != w {
			t.Errorf("attempt %d: %s, want %s", i, got, w)
		}
	}
	if got := Delay(time.Second, 10*time.Second, 1<<20, 0); got != 10*time.Second {
		t.Errorf("a huge attempt count: %s", got)
	}
	if Delay(0, time.Second, 3, 0.5) != 0 {
		t.Error("no base, no wait")
	}
}

func TestDelayJitterStaysInBounds(t *testing.T) {
	for range 1000 {
		d := Delay(4*time.Second, time.Minute, 0, 0.25)
		if d < 3*time.Second || d > 5*time.Second {
			t.Fatalf("%s outside 4 s ±25 %%", d)
		}
	}
}

func TestBackoffNextAndReset(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 4 * time.Second}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset: %s", d)
	}
}

// TestSleep: a wait passes unless its context ends first, and a context
// that has ended ends a wait of zero too (in a bubble: the hour is
// virtual).
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if !Sleep(context.Background(), time.Hour) || !Sleep(context.Background(), 0) {
			t.Fatal("a wait with a live context did not pass")
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		if Sleep(ctx, time.Hour) {
			t.Fatal("a wait whose context ended passed")
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Fatalf("the wait ended after %v, not when its context did", waited)
		}
		if Sleep(ctx, 0) {
			t.Fatal("a wait of zero with an ended context passed")
		}
	})
}
