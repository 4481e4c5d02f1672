package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// GC targets of `agentd run` when GOGC is not set in the environment.
//
// daemonGOGC applies while the live heap is small: the heap may grow 50 %
// over the live data between collections instead of Go's default 100 %. A
// node's live data is mostly the records it holds, so this is most of its
// resident memory: with 10 000 hosted records 179 MB instead of 227 MB,
// for GC work a daemon at rest hardly notices (docs/performance.md,
// "Memory per record"). Prometheus makes the same trade with 75.
//
// daemonLargeGOGC applies once the live heap passes largeHeap (and until
// it falls below smallHeap): a registry holding 100 000 records has
// ~200 MB of live heap, and at 25 it kept 305–317 MB of anonymous memory
// instead of 364–375 MB at 50, registering as fast (four clients, two runs
// each). At 10 000 records (30 MB live) 25 cost 5–20 % of the registration
// rate for 9 MB, so small heaps keep 50. VictoriaMetrics runs at 30.
//
// daemonStartGOGC applies while `agentd run` starts, until the API serves:
// a start decodes every stored registration, and at daemonGOGC the
// collector, marking a heap that grows with each cycle, took a third of
// the CPU of a 100 000-record start. At 200 the start served in 1.45 s
// instead of 1.9 s (docs/performance.md); the heap may reach three times
// the live data meanwhile, and shrinks to the daemon's target at the next
// collection.
const (
	daemonGOGC      = 50
	daemonLargeGOGC = 25
	daemonStartGOGC = 200

	largeHeap = 192 << 20
	smallHeap = 128 << 20

	gcTargetEvery = 5 * time.Second
)

// gcPercentFor is the GC target for a live heap of live bytes when cur is
// the target now: the band between smallHeap and largeHeap keeps cur, so a
// heap near the line does not switch at every look.
func gcPercentFor(live uint64, cur int) int {
	switch {
	case live >= largeHeap:
		return daemonLargeGOGC
	case live < smallHeap:
		return daemonGOGC
	default:
		return cur
	}
}

// gcTarget keeps the GC target at gcPercentFor of the live heap, looking
// every gcTargetEvery. Start it once the daemon serves; stop ends it.
type gcTarget struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startGCTarget() *gcTarget {
	ctx, cancel := context.WithCancel(context.Background())
	g := &gcTarget{cancel: cancel}
	cur := daemonGOGC
	debug.SetGCPercent(cur)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	g.wg.Go(func() {
		t := time.NewTicker(gcTargetEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return // not measured by this runtime: keep daemonGOGC
			}
			if next := gcPercentFor(sample[0].Value.Uint64(), cur); next != cur {
				debug.SetGCPercent(next)
				cur = next
			}
		}
	})
	return g
}

// stop ends the goroutine and waits for it; the target stays as it is.
func (g *gcTarget) stop() {
	g.cancel()
	g.wg.Wait()
}
