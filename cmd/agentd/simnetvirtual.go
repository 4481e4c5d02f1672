package main

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/simnet"
)

// runVirtual runs a simnet scenario in virtual time and exits the process
// with the code finish returns; it does not return.
//
// Virtual time is Go's testing/synctest bubble: inside it the clock
// advances only when every goroutine of the bubble is blocked, so however
// busy the CPU is, a 20 ms link takes 20 ms and a heartbeat is due every
// 5 s of simulated time. A bubble needs a *testing.T, which only the
// testing package's runner provides; testing.Main is that runner's entry
// point kept (Go 1 compatible) for programs that run tests themselves. It
// parses os.Args for its -test.* flags, so they are cut to the program
// name first, and it exits when its tests end, so the single test below
// writes the report and exits with the command's code itself.
//
// The run's context cannot cross into the bubble (a goroutine waiting on
// a channel made outside it never counts as blocked, and the clock would
// stop): an interrupt sets a flag that a goroutine inside polls every
// 100 ms of simulated time.
func runVirtual(ctx context.Context, run func(context.Context) (*simnet.Report, error), finish func(*simnet.Report, error) int) {
	var interrupted atomic.Bool
	stop := context.AfterFunc(ctx, func() { interrupted.Store(true) })
	test := func(t *testing.T) {
		var rep *simnet.Report
		var runErr error
		synctest.Test(t, func(*testing.T) {
			inner, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						if interrupted.Load() {
							cancel()
							return
						}
					}
				}
			}()
			rep, runErr = run(inner)
			close(done)
		})
		stop()
		os.Exit(finish(rep, runErr))
	}
	os.Args = os.Args[:1]
	testing.Main(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "Simnet", F: test}}, nil, nil)
	os.Exit(exitFailed) // not reached: testing.Main exits
}

// untimed is a log handler that leaves out the time of each record: in a
// virtual-time run it would be the simulated clock.
type untimed struct{ slog.Handler }

func (h untimed) Handle(ctx context.Context, r slog.Record) error {
	r.Time = time.Time{}
	return h.Handler.Handle(ctx, r)
}

func (h untimed) WithAttrs(as []slog.Attr) slog.Handler { return untimed{h.Handler.WithAttrs(as)} }
func (h untimed) WithGroup(n string) slog.Handler       { return untimed{h.Handler.WithGroup(n)} }
