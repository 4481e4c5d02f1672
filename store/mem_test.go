package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
)

// rssChildEnv switches the test binary into the memory probe: it opens
// rssStores in-memory stores, caches rssRecords records in each, and prints
// its resident set size.
const rssChildEnv = "AGENTD_STORE_RSS_CHILD"

const (
	rssStores  = 100
	rssRecords = 100
	// rssLimitMiB fails the test when 100 stores with 100 records each
	// need more than this. Measured: see docs/performance.md.
	rssLimitMiB = 400
)

func vmRSSKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

func rssChild() int {
	ctx := context.Background()
	id, err := trust.Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	recs := make([]*record.SignedAgent, rssRecords)
	for i := range recs {
		a := &record.Agent{
			AgentID: uuid.NewString(), Capabilities: map[string]string{}, Description: "an agent of the memory probe",
			Transport: record.Transport{Type: "tcp", Endpoint: "127.0.0.1:1"}, Tags: []string{"prod"},
			Skills: []record.Skill{skill("probe-"+strconv.Itoa(i%10), "1.0.0", record.SkillTool, []string{"s"}, "a", "b", "c"+strconv.Itoa(i))},
			Seq:    1, IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 3600,
		}
		if recs[i], err = id.Sign(a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	runtime.GC()
	before := vmRSSKiB()
	stores := make([]Store, rssStores)
	for i := range stores {
		if stores[i], err = Open(Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	runtime.GC()
	opened := vmRSSKiB()
	for _, s := range stores {
		for _, sa := range recs {
			if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		}
	}
	runtime.GC()
	filled := vmRSSKiB()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("rss_before_kib %d\nrss_opened_kib %d\nrss_filled_kib %d\nheap_inuse_kib %d\ngoroutines %d\n",
		before, opened, filled, ms.HeapInuse>>10, runtime.NumGoroutine())
	for _, s := range stores {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0
}

// TestMemoryOfHundredStores measures, in a fresh process, the resident
// memory of 100 in-memory stores (the simnet shape) holding 100 records
// each.
func TestMemoryOfHundredStores(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory makes RSS meaningless")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rssChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	vals := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 {
			vals[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	opened := (vals["rss_opened_kib"] - vals["rss_before_kib"]) >> 10
	filled := (vals["rss_filled_kib"] - vals["rss_before_kib"]) >> 10
	t.Logf("%d in-memory stores: +%d MiB RSS open, +%d MiB with %d records each (heap in use %d MiB, %d goroutines)",
		rssStores, opened, filled, rssRecords, vals["heap_inuse_kib"]>>10, vals["goroutines"])
	if vals["rss_filled_kib"] <= 0 {
		t.Fatalf("probe printed no RSS: %s", out)
	}
	if filled > rssLimitMiB {
		t.Fatalf("RSS of %d stores is %d MiB, limit %d MiB", rssStores, filled, rssLimitMiB)
	}
}

// TestInsideSynctestBubble runs a store in virtual time, as the simnet
// harness does: entries go stale when the bubble's clock passes their
// expiry, the refresh hook fires from the store's goroutine, and Close
// inside the bubble leaves no goroutine behind.
func TestInsideSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := Open(Options{CacheTTL: time.Minute, RefreshBefore: 10 * time.Second, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		sa := mkRecord(t, agentSpec{issued: time.Now()})
		fired := make(chan Entry, 1)
		s.OnRefresh(func(e Entry) { fired <- e })
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e := <-fired
		if got := time.Since(start); got < 50*time.Second || got > 51*time.Second {
			t.Fatalf("hook fired after %v of virtual time, want 50 s (+1 s sweep)", got)
		}
		if e.Record != sa {
			t.Fatal("hook got another record")
		}
		// The entry expires 60 s after it was put (10 s after the hook).
		took := testutil.Eventually(t, 15*time.Second, "the entry to go stale", func() bool {
			got, err := s.Get(ctx, sa.Agent.AgentID)
			return err == nil && got.Stale
		})
		if took < 9*time.Second {
			t.Fatalf("stale %v after the hook, want about 10 s (expiry at 60 s)", took)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
	})
}
