package skillcenter

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// flaky serves h, failing the first n requests with status (0: closing
// the connection).
type flaky struct {
	fails  atomic.Int64
	status int
	h      http.Handler
	seen   atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen.Add(1)
	if f.fails.Add(-1) >= 0 {
		if f.status == 0 {
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			_ = c.Close()
			return
		}
		w.Header().Set("Retry-After", "0")
		http.Error(w, `{"error":"ErrUnavailable","message":"busy"}`, f.status)
		return
	}
	f.h.ServeHTTP(w, r)
}

func TestClientRetriesThenSucceeds(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, 0} {
		f := &flaky{status: status, h: m.s.Handler()}
		f.fails.Store(2)
		srv := httptest.NewServer(f)
		c := newTestClient(t, srv.URL, Options{Retries: 2})
		a, err := c.List(context.Background())
		if err != nil || len(a.Value.Skills) != 2 || a.Stale || a.Cached {
			t.Fatalf("status %d: %+v %v", status, a, err)
		}
		if f.seen.Load() != 3 {
			t.Fatalf("status %d: %d attempts, want 3", status, f.seen.Load())
		}
		if st := c.State(); st.Circuit != circuitClosed || st.Failures != 0 {
			t.Fatalf("state after success %+v", st)
		}
		srv.Close()
	}
}

func TestClientDoesNotRetryClientErrors(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"ErrMalformedPayload","message":"version: bad","field":"version"}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, Options{Retries: 3})
	_, err := c.Search(context.Background(), SearchRequest{Capabilities: []string{"x"}})
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != 400 || he.Code != record.CodeMalformedPayload || he.Field != "version" {
		t.Fatalf("error %v", err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d attempts for a 400", n.Load())
	}
	if st := c.State(); st.Failures != 0 {
		t.Fatalf("a 400 counted as a failure: %+v", st)
	}
	// Invalid requests never leave the client.
	if _, err := c.Search(context.Background(), SearchRequest{Types: []string{"x"}}); record.FieldOf(err) != "types[0]" {
		t.Fatalf("invalid search: %v", err)
	}
	if n.Load() != 1 {
		t.Fatal("an invalid search was sent")
	}
}

func TestClientCircuitBreaker(t *testing.T) {
	clk := newClock()
	f := &flaky{status: http.StatusInternalServerError, h: newMirror(t, seedCatalog(t), ServerOptions{}).s.Handler()}
	f.fails.Store(1 << 30)
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newTestClient(t, srv.URL, Options{Retries: 1, BreakerFailures: 3, BreakerCooldown: 30 * time.Second, Now: clk.Now, CacheTTL: -1})
	ctx := context.Background()
	if _, err := c.List(ctx); err == nil { // attempts 1, 2
		t.Fatal("no error")
	}
	_, err := c.List(ctx) // attempt 3 opens the circuit
	var he *HTTPError
	if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &he) || he.Status != 500 {
		t.Fatalf("third failure: %v", err)
	}
	if st := c.State(); st.Circuit != circuitOpen || st.Failures != 3 {
		t.Fatalf("state %+v", st)
	}
	seen := f.seen.Load()
	if seen != 3 {
		t.Fatalf("%d attempts", seen)
	}
	// Open: fails fast, nothing sent.
	if _, err := c.Get(ctx, "skill-org-feishu"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("open circuit: %v", err)
	}
	if f.seen.Load() != seen {
		t.Fatal("a request went out while the circuit was open")
	}
	// After the cool-down one probe goes; its failure opens it again.
	clk.Advance(31 * time.Second)
	if _, err := c.List(ctx); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("failed probe: %v", err)
	}
	if f.seen.Load() != seen+1 {
		t.Fatalf("probe attempts: %d", f.seen.Load()-seen)
	}
	if st := c.State(); st.Circuit != circuitOpen {
		t.Fatalf("after a failed probe: %+v", st)
	}
	// A successful probe closes it.
	f.fails.Store(0)
	clk.Advance(31 * time.Second)
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("successful probe: %v", err)
	}
	if st := c.State(); st.Circuit != circuitClosed || st.Failures != 0 {
		t.Fatalf("after a successful probe: %+v", st)
	}
}

func TestBreakerHalfOpenAdmitsOneProbe(t *testing.T) {
	b := newBreaker(1, time.Second)
	now := time.Unix(0, 0)
	if !b.allow(now) || !b.done(now, outcomeFailure) {
		t.Fatal("one failure should open a threshold-1 breaker")
	}
	if b.allow(now.Add(500 * time.Millisecond)) {
		t.Fatal("allowed during the cool-down")
	}
	later := now.Add(2 * time.Second)
	if !b.allow(later) || b.allow(later) {
		t.Fatal("half-open must admit exactly one probe")
	}
	b.done(later, outcomeNeutral) // the caller gave up: another probe may go
	if !b.allow(later) {
		t.Fatal("no probe after a neutral outcome")
	}
	b.done(later, outcomeSuccess)
	if st, _ := b.snapshot(); st != circuitClosed || !b.allow(later) || !b.allow(later) {
		t.Fatal("not closed after a successful probe")
	}
}

func TestClientCacheAndStaleAnswers(t *testing.T) {
	clk := newClock()
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	ch := counting(m.s.Handler())
	srv := httptest.NewServer(ch)
	c := newTestClient(t, srv.URL, Options{Now: clk.Now, CacheTTL: 300 * time.Second, StaleFor: time.Hour, Retries: -1})
	ctx := context.Background()
	req := SearchRequest{Capabilities: []string{"user-auth"}}

	a, err := c.Search(ctx, req)
	if err != nil || a.Cached || a.Stale || len(a.Value.Skills) != 2 {
		t.Fatalf("first: %+v %v", a, err)
	}
	clk.Advance(299 * time.Second)
	a, err = c.Search(ctx, req)
	if err != nil || !a.Cached || a.Stale {
		t.Fatalf("inside the TTL: %+v %v", a, err)
	}
	if n := ch.count("POST /api/skills/search"); n != 1 {
		t.Fatalf("%d searches reached the server inside the TTL", n)
	}
	// A GET answer is revalidated with If-None-Match when it expires.
	if _, err := c.Get(ctx, "skill-org-feishu"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // the search expires
	a, err = c.Search(ctx, req)
	if err != nil || a.Cached || a.Stale || ch.count("POST /api/skills/search") != 2 {
		t.Fatalf("after the TTL: %+v %v", a, err)
	}
	clk.Advance(301 * time.Second)
	g, err := c.Get(ctx, "skill-org-feishu")
	if err != nil || g.Cached || g.Value.ID != "skill-org-feishu" || !g.FetchedAt.Equal(clk.Now()) {
		t.Fatalf("revalidated get: %+v %v", g, err)
	}
	if n := ch.count("conditional GET /api/skills/skill-org-feishu"); n != 1 {
		t.Fatalf("%d conditional GETs, want 1", n)
	}
	// The 304 renewed the entry: inside the TTL again, no request.
	clk.Advance(time.Second)
	if g, err = c.Get(ctx, "skill-org-feishu"); err != nil || !g.Cached || ch.count("GET /api/skills/skill-org-feishu") != 2 {
		t.Fatalf("after the 304: %+v %v", g, err)
	}

	// The catalog goes away: expired answers come back stale, with the
	// cause; fresh ones still come from the cache.
	srv.Close()
	clk.Advance(301 * time.Second)
	a, err = c.Search(ctx, req)
	if err != nil || !a.Stale || a.Cause == nil || len(a.Value.Skills) != 2 {
		t.Fatalf("stale search: %+v %v", a, err)
	}
	// Another request, never cached: an error.
	if _, err := c.Search(ctx, SearchRequest{Capabilities: []string{"other"}}); err == nil || errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("uncached request: %v", err)
	}
	// Past the stale window nothing is left.
	clk.Advance(2 * time.Hour)
	if _, err := c.Search(ctx, req); err == nil {
		t.Fatal("an answer outlived the stale window")
	}
}

func TestClientNotFoundIsNeverStale(t *testing.T) {
	clk := newClock()
	dir := seedCatalog(t)
	m := newMirror(t, dir, ServerOptions{})
	c := newTestClient(t, m.url, Options{Now: clk.Now})
	ctx := context.Background()
	if _, err := c.Get(ctx, "skill-org-dingding"); err != nil {
		t.Fatal(err)
	}
	// The skill leaves the catalog.
	empty := t.TempDir()
	cat, err := LoadCatalog(empty)
	if err != nil {
		t.Fatal(err)
	}
	m.s.SetCatalog(cat)
	clk.Advance(301 * time.Second)
	if _, err := c.Get(ctx, "skill-org-dingding"); !IsNotFound(err) {
		t.Fatalf("removed skill: %v", err)
	}
	if c.cache.len() != 0 {
		t.Fatal("a 404 left the entry cached")
	}
}

func TestClientBoundsAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"total":1,"skills":[{"id":"`+strings.Repeat("a", 2000)+`"}]}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, Options{MaxResponseBytes: 1000})
	if _, err := c.List(context.Background()); !errors.Is(err, ErrResponseTooLarge) {
		t.Fatalf("oversize answer: %v", err)
	}
	c2 := newTestClient(t, srv.URL, Options{})
	if _, err := c2.List(context.Background()); record.FieldOf(err) != "skills[0].id" {
		t.Fatalf("overlong id: %v", err)
	}
}

func TestClientTimeoutAndContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newTestClient(t, srv.URL, Options{Timeout: 50 * time.Millisecond, Retries: 1})
	_, err := c.List(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
	if st := c.State(); st.Failures != 2 {
		t.Fatalf("timeouts counted %d, want 2", st.Failures)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if st := c.State(); st.Failures != 2 {
		t.Fatalf("the caller's cancellation counted as a failure: %+v", st)
	}
}

func TestClientListFollowsPages(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		id := "s" + string(rune('a'+i))
		writeSkill(t, dir, id, skillManifest(id, []string{"c"}, nil), nil)
	}
	m := newMirror(t, dir, ServerOptions{})
	// A front that pages by 2, as a mirror with a small page would.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		q.Set("limit", "2")
		r.URL.RawQuery = q.Encode()
		m.s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, Options{})
	a, err := c.List(context.Background())
	if err != nil || len(a.Value.Skills) != 5 || a.Value.Skills[4].ID != "se" {
		t.Fatalf("%+v %v", a.Value, err)
	}
}

func TestNewClientRefuses(t *testing.T) {
	for _, u := range []string{"ftp://x", "http://", "x", "http://h/?q=1", "http://u:p@h"} {
		if _, err := NewClient(u, Options{}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
	if _, err := NewClient("http://h", Options{Token: "a b"}); err == nil {
		t.Error("token with a space accepted")
	}
	c, err := NewClient("https://h/prefix/", Options{})
	if err != nil || c.URL() != "https://h/prefix" {
		t.Fatalf("%v %v", c, err)
	}
	_ = c.Close()
	if _, err := c.List(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestClientEscapesPaths(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(CatalogHeader) != "1" {
			t.Errorf("no %s header", CatalogHeader)
		}
		got = append(got, r.URL.EscapedPath())
		http.Error(w, `{"error":"DISC_002","message":"no"}`, http.StatusNotFound)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL+"/pre%20fix", Options{})
	for _, id := range []string{"a b", "a/b", "ü"} {
		if _, err := c.Get(context.Background(), id); !IsNotFound(err) {
			t.Fatalf("%q: %v", id, err)
		}
	}
	want := []string{"/pre%20fix/api/skills/a%20b", "/pre%20fix/api/skills/a%2Fb", "/pre%20fix/api/skills/%C3%BC"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("paths %v, want %v", got, want)
	}
}
