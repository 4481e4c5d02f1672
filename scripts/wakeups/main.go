// Command wakeups reads a Go execution trace (an agentd started with
// AGENTD_PPROF serves one at /debug/pprof/trace?seconds=N) and counts, per
// second, the goroutine wake-ups by where the goroutine waited and by who
// woke it (the first frames outside the runtime). An idle daemon's CPU is
// mostly the scheduler parking and waking threads, and a CPU profile says
// that without saying for whom; this says for whom.
//
//	go run . trace.out
//
// It is its own module (golang.org/x/exp/trace is not a dependency of
// agentd) and is not built by make.
package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: wakeups TRACE")
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	var (
		where       = map[string]int{} // where the woken goroutine waited
		by          = map[string]int{} // who woke it
		blocked     = map[trace.GoID]string{}
		first, last trace.Time
		total       int
	)
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if first == 0 {
			first = ev.Time()
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		from, to := st.Goroutine()
		g := st.Resource.Goroutine()
		switch {
		case from == trace.GoRunning && to == trace.GoWaiting:
			blocked[g] = frames(ev.Stack(), st.Reason)
		case from == trace.GoWaiting && to == trace.GoRunnable:
			total++
			w, ok := blocked[g]
			if !ok {
				w = "(blocked before the trace began)"
			}
			where[w]++
			by[frames(ev.Stack(), st.Reason)]++
		}
	}
	secs := float64(last-first) / 1e9
	fmt.Printf("%.1f s traced, %d wake-ups, %.0f a second\n", secs, total, float64(total)/secs)
	for _, t := range []struct {
		title string
		m     map[string]int
	}{{"waited in", where}, {"woken by", by}} {
		fmt.Printf("\n%s:\n", t.title)
		keys := slices.SortedFunc(maps.Keys(t.m), func(a, b string) int { return cmp.Compare(t.m[b], t.m[a]) })
		for _, k := range keys[:min(len(keys), 25)] {
			fmt.Printf("%8.1f/s  %s\n", float64(t.m[k])/secs, k)
		}
	}
}

// frames names a stack by its first three frames outside the runtime and
// the standard library's synchronisation, or by the reason when it has
// none (a timer, the network poller).
func frames(s trace.Stack, reason string) string {
	var fr []string
	for f := range s.Frames() {
		fn := f.Func
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/") || strings.HasPrefix(fn, "sync.") || strings.HasPrefix(fn, "time.") {
			continue
		}
		if fr = append(fr, fn); len(fr) == 3 {
			break
		}
	}
	if len(fr) == 0 {
		return "(" + reason + ")"
	}
	return strings.Join(fr, " < ")
}
