package skillcenter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testLogger sends logs to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// skillManifest is a valid manifest object for id with a package of
// content pkg (nil: no package).
func skillManifest(id string, caps []string, pkg []byte) map[string]any {
	m := map[string]any{
		"id": id, "name": "Skill " + id, "version": "0.7.0", "type": "enterprise-skill",
		"capabilities": caps, "scenes": []string{"auth"},
		"endpoint":    "https://skills.example.net/" + id,
		"description": "the " + id + " skill", "keywords": []string{"org", id},
	}
	if pkg != nil {
		sum := sha256.Sum256(pkg)
		m["package"] = map[string]any{"file": id + "-0.7.0.tar.gz", "sha256": hex.EncodeToString(sum[:]), "size": len(pkg)}
	}
	return m
}

// writeSkill writes DIR/<id>/manifest.json (the raw JSON given, or the
// object marshalled) and the package file when pkg is not nil.
func writeSkill(t testing.TB, dir, id string, manifest any, pkg []byte) {
	t.Helper()
	sdir := filepath.Join(dir, id)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b []byte
	switch m := manifest.(type) {
	case []byte:
		b = m
	default:
		var err error
		if b, err = json.MarshalIndent(m, "", "  "); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sdir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if pkg != nil {
		if err := os.WriteFile(filepath.Join(sdir, id+"-0.7.0.tar.gz"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// seedCatalog writes the two skills of seed 001 §7.3 (feishu with a
// package, dingding without) and returns the directory.
func seedCatalog(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	writeSkill(t, dir, "skill-org-feishu", skillManifest("skill-org-feishu", []string{"org-data-read", "user-auth"}, []byte("feishu package bytes")), []byte("feishu package bytes"))
	m := skillManifest("skill-org-dingding", []string{"org-data-read", "user-auth"}, nil)
	m["keywords"] = []string{"dingtalk"}
	writeSkill(t, dir, "skill-org-dingding", m, nil)
	return dir
}

// mirror is a mirror over a catalog, served by httptest.
type mirror struct {
	t   testing.TB
	s   *Server
	srv *httptest.Server
	url string
}

func newMirror(t testing.TB, dir string, o ServerOptions) *mirror {
	t.Helper()
	cat, err := LoadCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	s, err := NewServer(cat, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &mirror{t: t, s: s, srv: srv, url: srv.URL}
}

// newTestClient is a client with fast retries, closed at cleanup.
func newTestClient(t testing.TB, url string, o Options) *Client {
	t.Helper()
	if o.Backoff == 0 {
		o.Backoff = time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	c, err := NewClient(url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// countingHandler counts the requests that reach h.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
	h  http.Handler
}

func counting(h http.Handler) *countingHandler { return &countingHandler{n: map[string]int{}, h: h} }

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.n[r.Method+" "+r.URL.Path]++
	if r.Header.Get("If-None-Match") != "" {
		c.n["conditional "+r.Method+" "+r.URL.Path]++
	}
	c.mu.Unlock()
	c.h.ServeHTTP(w, r)
}

func (c *countingHandler) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func bigOne() *big.Int { return big.NewInt(1) }
