package skillcenter

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
)

var waitFor = testutil.Eventually

// p2pSwitch is a settable P2PWorks that counts the checks; script, when
// not empty, gives the next answers before the steady one.
type p2pSwitch struct {
	mu     sync.Mutex
	steady bool
	script []bool
	checks atomic.Int64
}

func (p *p2pSwitch) check() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks.Add(1)
	if len(p.script) > 0 {
		v := p.script[0]
		p.script = p.script[1:]
		return v
	}
	return p.steady
}

func (p *p2pSwitch) set(steady bool, script ...bool) {
	p.mu.Lock()
	p.steady, p.script = steady, script
	p.mu.Unlock()
}

// waitChecks waits until n more checks have run.
func (p *p2pSwitch) waitChecks(t testing.TB, n int64) {
	t.Helper()
	target := p.checks.Load() + n
	waitFor(t, 5*time.Second, "fallback checks", func() bool { return p.checks.Load() >= target })
}

func TestFallbackAgainstMirror(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{JWTSecret: testSecret})
	ch := counting(m.s.Handler())
	srv := httptest.NewServer(ch)
	defer srv.Close()
	sa, _ := signedRecord(t, "fallback-skill", "cap-f")
	var mu sync.Mutex
	locals := []*record.SignedAgent{sa}
	sw := &p2pSwitch{}
	f, err := NewFallback(FallbackConfig{URL: srv.URL + "/", Token: token(t, ScopeWrite, time.Hour), Interval: 10 * time.Millisecond, DownAfter: 2, UpAfter: 3, Logger: testLogger(t)},
		FallbackDeps{Locals: func() []*record.SignedAgent { mu.Lock(); defer mu.Unlock(); return locals }, P2PWorks: sw.check})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()

	// No P2P: registered, and kept fresh.
	waitFor(t, 5*time.Second, "the registration", func() bool { return m.s.Registered() == 1 })
	if !f.Status().Active {
		t.Fatal("not active")
	}
	n := ch.count("POST /agents")
	waitFor(t, 5*time.Second, "a refresh", func() bool { return ch.count("POST /agents") >= n+3 })
	if st := f.Status(); st.LastError != "" || st.Posts < 3 || st.LastPost.IsZero() {
		t.Fatalf("status %+v", st)
	}

	// P2P works again: after UpAfter good checks the posts stop.
	sw.set(true)
	waitFor(t, 5*time.Second, "the fallback to stop", func() bool { return !f.Status().Active })
	n = ch.count("POST /agents")
	sw.waitChecks(t, 5)
	if got := ch.count("POST /agents"); got != n {
		t.Fatalf("%d posts after P2P came back", got-n)
	}

	// A flap of one bad check does not restart registering (DownAfter 2).
	sw.set(true, false)
	sw.waitChecks(t, 4)
	if ch.count("POST /agents") != n {
		t.Fatal("a single failed check restarted the registration")
	}

	// A refused registration is reported, then clears once fixed.
	sw.set(false)
	mu.Lock()
	unsigned := sa.Clone()
	unsigned.PeerSignature = nil
	locals = []*record.SignedAgent{sa, unsigned} // no peer signature
	mu.Unlock()
	waitFor(t, 5*time.Second, "the refusal to be reported", func() bool { return strings.Contains(f.Status().LastError, "HTTP 400") })
	mu.Lock()
	locals = []*record.SignedAgent{sa}
	mu.Unlock()
	f.Refresh()
	waitFor(t, 5*time.Second, "the error to clear", func() bool { return f.Status().LastError == "" })

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := f.Start(context.Background()); err == nil {
		t.Fatal("Start after Close")
	}
}

func TestFallbackReportsAuthFailures(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{JWTSecret: testSecret})
	sa, _ := signedRecord(t, "s", "c")
	f, err := NewFallback(FallbackConfig{URL: m.url, Token: token(t, ScopeRead, time.Hour), Interval: 10 * time.Millisecond, DownAfter: 1},
		FallbackDeps{Locals: func() []*record.SignedAgent { return []*record.SignedAgent{sa} }, P2PWorks: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	waitFor(t, 5*time.Second, "the refusal", func() bool { return strings.Contains(f.Status().LastError, "ErrForbidden") })
	if m.s.Registered() != 0 {
		t.Fatal("registered with a read-only token")
	}
}

func TestNewFallbackRefuses(t *testing.T) {
	deps := FallbackDeps{Locals: func() []*record.SignedAgent { return nil }, P2PWorks: func() bool { return true }}
	for _, c := range []FallbackConfig{{URL: ""}, {URL: "ftp://x"}, {URL: "http://x", Token: "a b"}} {
		if _, err := NewFallback(c, deps); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := NewFallback(FallbackConfig{URL: "http://x"}, FallbackDeps{}); err == nil {
		t.Error("missing deps accepted")
	}
	f, err := NewFallback(FallbackConfig{URL: "http://x"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil { // never started
		t.Fatal(err)
	}
}
