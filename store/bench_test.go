package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
)

// benchN is the population of the benchmark store.
const benchN = 10_000

var (
	benchOnce sync.Once
	benchRecs []*record.SignedAgent
	benchErr  error
)

// benchRecords builds, once per process, benchN realistic signed records,
// each with its own identity: 1-3 skills out of 50, 2-5 capabilities each
// out of 200, 0-2 scenes out of 20, 2-3 tags out of 20, one tenant in six
// unset, versions 0.x-3.x. The seeded generator makes every run see the
// same population.
func benchRecords(b *testing.B) []*record.SignedAgent {
	b.Helper()
	benchOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 2))
		now := time.Now()
		ver := func() string { return fmt.Sprintf("%d.%d.%d", r.IntN(4), r.IntN(10), r.IntN(10)) }
		benchRecs = make([]*record.SignedAgent, benchN)
		for i := range benchRecs {
			id, err := trust.Generate()
			if err != nil {
				benchErr = err
				return
			}
			a := &record.Agent{
				AgentID:      uuid.NewString(),
				AgentName:    fmt.Sprintf("agent-%d", i),
				Capabilities: map[string]string{},
				Transport:    record.Transport{Type: "libp2p", Endpoint: "/p2p/" + id.PeerID.String()},
				Description:  "benchmark agent offering a handful of skills to its peers",
				Version:      ver(),
				Seq:          1,
				IssuedAt:     now.UTC().Format(time.RFC3339Nano),
				TTLSeconds:   3600,
			}
			if t := r.IntN(6); t > 0 {
				a.TenantScope = fmt.Sprintf("tenant-%d", t)
			}
			for _, k := range r.Perm(20)[:2+r.IntN(2)] {
				a.Tags = append(a.Tags, fmt.Sprintf("tag-%02d", k))
			}
			for _, k := range r.Perm(50)[:1+r.IntN(3)] {
				s := record.Skill{SkillID: fmt.Sprintf("skill-%02d", k), Version: ver(), SkillType: record.SkillTool}
				for _, sc := range r.Perm(20)[:r.IntN(3)] {
					s.Scenes = append(s.Scenes, fmt.Sprintf("scene-%02d", sc))
				}
				for _, c := range r.Perm(200)[:2+r.IntN(4)] {
					s.Capabilities = append(s.Capabilities, record.Capability{ID: fmt.Sprintf("cap-%03d", c), Description: "capability of the benchmark"})
				}
				a.Skills = append(a.Skills, s)
			}
			a.SyncCapabilities()
			if benchRecs[i], err = id.Sign(a); err != nil {
				benchErr = err
				return
			}
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchRecs
}

// benchStore opens a store (on disk in a temp dir, or in memory) holding
// every benchmark record.
func benchStore(b *testing.B, disk, syncWrites bool) *db {
	b.Helper()
	recs := benchRecords(b)
	o := Options{MaxEntries: 2 * benchN, CacheTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if disk {
		o.Dir = b.TempDir()
	}
	s, err := open(o, syncWrites)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for _, sa := range recs {
		if err := s.Put(ctx, Entry{Record: sa, Source: SourceGossip}); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// cpuTime is the CPU time the process has used (all threads: the caller,
// Badger's writer and compactors, the GC). Reported per op beside the wall
// time, it stays meaningful on a shared, loaded machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs op in b.Loop and reports the CPU time per op.
func loop(b *testing.B, op func(i int)) {
	b.ReportAllocs()
	c0 := cpuTime()
	i := 0
	for b.Loop() {
		op(i)
		i++
	}
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
}

func benchModes(b *testing.B, fn func(b *testing.B, s *db)) {
	b.Run("mem", func(b *testing.B) { fn(b, benchStore(b, false, false)) })
	b.Run("disk", func(b *testing.B) { fn(b, benchStore(b, true, false)) })
}

// BenchmarkPut re-puts records of the 10 000 already cached (same seq): the
// value and every posting are rewritten with a new TTL.
func BenchmarkPut(b *testing.B) {
	benchModes(b, func(b *testing.B, s *db) {
		ctx := context.Background()
		recs := benchRecords(b)
		loop(b, func(i int) {
			if err := s.Put(ctx, Entry{Record: recs[i%len(recs)], Source: SourceDHT}); err != nil {
				b.Fatal(err)
			}
		})
	})
	// The alternative: a Badger opened with SyncWrites, where every cache
	// write is synced too.
	b.Run("disk-syncwrites", func(b *testing.B) {
		s := benchStore(b, true, true)
		ctx := context.Background()
		recs := benchRecords(b)
		loop(b, func(i int) {
			if err := s.Put(ctx, Entry{Record: recs[i%len(recs)], Source: SourceDHT}); err != nil {
				b.Fatal(err)
			}
		})
	})
}

func BenchmarkGet(b *testing.B) {
	benchModes(b, func(b *testing.B, s *db) {
		ctx := context.Background()
		recs := benchRecords(b)
		loop(b, func(i int) {
			if _, err := s.Get(ctx, recs[(i*7919)%len(recs)].Agent.AgentID); err != nil {
				b.Fatal(err)
			}
		})
	})
}

func benchQuery(b *testing.B, f Filter) {
	benchModes(b, func(b *testing.B, s *db) {
		ctx := context.Background()
		n := 0
		loop(b, func(int) {
			got, err := s.Query(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			n = len(got)
		})
		if n == 0 {
			b.Fatal("query matched nothing")
		}
		b.ReportMetric(float64(n), "results/op")
	})
}

// BenchmarkQueryCapability: every agent offering one capability (about 3 %
// of the population).
func BenchmarkQueryCapability(b *testing.B) {
	benchQuery(b, Filter{Capability: "cap-007"})
}

// BenchmarkQueryFiltered: capability + tag + semver constraint on the
// matching skill.
func BenchmarkQueryFiltered(b *testing.B) {
	benchQuery(b, Filter{Capability: "cap-007", Tags: []string{"tag-03"}, Version: ">=1.0.0 <3"})
}

// BenchmarkPutLocal measures a durable write: an unsynced commit and a
// synced journal entry (the store's choice) against a SyncWrites Badger
// (which syncs its value log and its write-ahead log in every commit, the
// two flushes DB.Sync made before the journal).
func BenchmarkPutLocal(b *testing.B) {
	for _, c := range []struct {
		name       string
		syncWrites bool
	}{{"journal", false}, {"syncwrites", true}} {
		b.Run(c.name, func(b *testing.B) {
			recs := benchRecords(b)
			s, err := open(Options{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, c.syncWrites)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			ctx := context.Background()
			loop(b, func(i int) {
				if err := s.PutLocal(ctx, recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
