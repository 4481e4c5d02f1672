package skillcenter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd/store"
)

// benchCatalog writes n skills, every tenth offering capability "hot".
func benchCatalog(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	for i := range n {
		id := fmt.Sprintf("skill-%05d", i)
		caps := []string{fmt.Sprintf("cap-%d", i%50)}
		if i%10 == 0 {
			caps = append(caps, "hot")
		}
		writeSkill(b, dir, id, skillManifest(id, caps, nil), nil)
	}
	return dir
}

// BenchmarkMirrorSearch is one POST /api/skills/search over a catalog of
// 1000 skills (100 match), handler only.
func BenchmarkMirrorSearch(b *testing.B) {
	cat, err := LoadCatalog(benchCatalog(b, 1000))
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewServer(cat, ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	body := `{"capabilities":["hot"],"types":["enterprise-skill"],"version":">=0.7.0"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/api/skills/search", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkResolveCached is the resolver's SkillCenter step answered from
// the client's cache: 100 skills mapped to agents and matched.
func BenchmarkResolveCached(b *testing.B) {
	cat, err := LoadCatalog(benchCatalog(b, 1000))
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewServer(cat, ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c, err := NewClient(srv.URL, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	f := store.Filter{Capability: "hot"}
	if ms, err := c.Resolve(context.Background(), f); err != nil || len(ms) != 100 {
		b.Fatalf("%d matches, %v", len(ms), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Resolve(context.Background(), f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSkillList decodes a §7.3 answer of 1000 skills.
func BenchmarkDecodeSkillList(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"total":1000,"skills":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"skill-%05d","name":"Skill %d","version":"0.7.0","type":"enterprise-skill","capabilities":["a","b"],"scenes":["auth"],"endpoint":"https://x.example/s/%d","downloadUrl":"https://x.example/api/skills/skill-%05d/download"}`, i, i, i, i)
	}
	sb.WriteString(`]}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeSkillList(data); err != nil {
			b.Fatal(err)
		}
	}
}
