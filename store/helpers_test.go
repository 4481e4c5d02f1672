package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(crashChildEnv) != "":
		os.Exit(crashChild(os.Getenv(crashChildEnv)))
	case os.Getenv(rssChildEnv) != "":
		os.Exit(rssChild())
	}
	goleak.VerifyTestMain(m)
}

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testLogger routes logs to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// openTest opens a store (in memory when dir is "") closed at cleanup.
func openTest(t testing.TB, dir string, o Options) *db {
	t.Helper()
	o.Dir = dir
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	s, err := open(o, false)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// agentSpec describes a test record.
type agentSpec struct {
	id       *trust.Identity
	agentID  string
	seq      uint64
	issued   time.Time
	ttl      time.Duration
	version  string
	tags     []string
	tenant   string
	name     string
	skills   []record.Skill
	agentCap map[string]string
}

var (
	idOnce sync.Once
	idMain *trust.Identity
)

// sharedIdentity is one identity signing many test records (the agent id
// of a record is independent of its keys).
func sharedIdentity(t testing.TB) *trust.Identity {
	idOnce.Do(func() {
		var err error
		if idMain, err = trust.Generate(); err != nil {
			panic(err)
		}
	})
	return idMain
}

func skill(id, version string, typ record.SkillType, scenes []string, caps ...string) record.Skill {
	s := record.Skill{SkillID: id, Version: version, SkillType: typ, Scenes: scenes}
	for _, c := range caps {
		s.Capabilities = append(s.Capabilities, record.Capability{ID: c, Description: "does " + c})
	}
	return s
}

// mkRecord signs a record for the spec, filling defaults.
func mkRecord(t testing.TB, sp agentSpec) *record.SignedAgent {
	t.Helper()
	id := sp.id
	if id == nil {
		id = sharedIdentity(t)
	}
	if sp.agentID == "" {
		sp.agentID = uuid.NewString()
	}
	if sp.seq == 0 {
		sp.seq = 1
	}
	if sp.issued.IsZero() {
		sp.issued = newClock().Now()
	}
	if sp.ttl == 0 {
		sp.ttl = time.Hour
	}
	if sp.skills == nil {
		sp.skills = []record.Skill{skill("skill-a", "1.0.0", record.SkillTool, nil, "cap-a")}
	}
	caps := sp.agentCap
	if caps == nil {
		caps = map[string]string{}
	}
	a := &record.Agent{
		AgentID:      sp.agentID,
		AgentName:    sp.name,
		Capabilities: caps,
		Transport:    record.Transport{Type: "tcp", Endpoint: "127.0.0.1:9000"},
		Description:  "test agent",
		Version:      sp.version,
		Skills:       sp.skills,
		Tags:         sp.tags,
		TenantScope:  sp.tenant,
		Seq:          sp.seq,
		IssuedAt:     sp.issued.UTC().Format(time.RFC3339Nano),
		TTLSeconds:   int64(sp.ttl / time.Second),
	}
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return sa
}

// resign returns a copy of sa's agent with a new seq, signed.
func resign(t testing.TB, sa *record.SignedAgent, seq uint64, mutate func(*record.Agent)) *record.SignedAgent {
	t.Helper()
	a := sa.Agent
	a.Seq = seq
	a.Skills = append([]record.Skill(nil), a.Skills...)
	if mutate != nil {
		mutate(&a)
	}
	out, err := sharedIdentity(t).Sign(&a)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return out
}

// ids returns the agent ids of entries.
func ids(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Record.Agent.AgentID
	}
	return out
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}

// countIndexKeys counts the postings of one agent in Badger.
func countIndexKeys(t testing.TB, s *db, agentID string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := s.scan(context.Background(), []byte(spaceIndex), false, func(k, _ []byte) error {
		tm, id, ok := parseIndexKey(k)
		if !ok {
			return fmt.Errorf("bad index key %q", k)
		}
		if id == agentID {
			out[string(tm.kind)+"/"+tm.val] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
