package weakctx

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dropChildren derives n contexts from c and drops them without
// cancelling them, as go-libp2p-pubsub's handleNewPeer does.
func dropChildren(c context.Context, n int) {
	cancels := make([]context.CancelFunc, 0, n) // dropped uncalled
	for range n {
		ctx, cancel := context.WithCancel(c)
		cancels = append(cancels, cancel)
		_ = context.AfterFunc(ctx, func() {})
	}
	_ = cancels
}

func TestDroppedChildrenAreCollected(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(parent)
	dropChildren(c, 1000)
	runtime.GC()
	runtime.GC()
	if n := c.Registered(); n != 0 {
		t.Fatalf("%d registrations after the children were dropped and collected; want 0", n)
	}
}

func TestLiveChildrenEndWithTheParent(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := New(parent)
	child, ccancel := context.WithCancel(c)
	defer ccancel()
	timed, tcancel := context.WithTimeout(c, time.Hour)
	defer tcancel()
	if c.Err() != nil || child.Err() != nil {
		t.Fatalf("Err before the end: %v, %v", c.Err(), child.Err())
	}
	if n := c.Registered(); n != 2 {
		t.Fatalf("Registered = %d, want 2", n)
	}
	boom := errors.New("boom")
	cancel(boom)
	for _, ctx := range []context.Context{c, child, timed} {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a context did not end with its parent")
		}
	}
	if !errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(child), boom) {
		t.Fatalf("child Err %v, cause %v; want Canceled and the parent's cause", child.Err(), context.Cause(child))
	}
	// A child derived after the end is done at once.
	late, lcancel := context.WithCancel(c)
	defer lcancel()
	testutil.Eventually(t, 10*time.Second, "a late child ends", func() bool { return late.Err() != nil })
}

func TestCancelledChildUnregisters(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(parent)
	_, ccancel := context.WithCancel(c)
	stop := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	if n := c.Registered(); n != 2 {
		t.Fatalf("Registered = %d, want 2", n)
	}
	ccancel()
	if !stop() {
		t.Fatal("stop before the end returned false")
	}
	if n := c.Registered(); n != 0 {
		t.Fatalf("Registered = %d after cancel and stop, want 0", n)
	}
	cancel()
	<-c.Done()
}
