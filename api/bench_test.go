package api

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// benchPopulation is the number of live agents, benchCaps the capability
// pool (three capabilities per agent: about 20 agents per capability).
const (
	benchPopulation = 1000
	benchCaps       = 150
)

// liveNode returns a node whose live view holds benchPopulation remote
// agents, each signed by its own identity and verified, as if fetched from
// their peers (gossip would hold them until their peers were reached).
func liveNode(b *testing.B) *tnode {
	b.Helper()
	n := newNode(b, nodeOpts{cfg: node.Config{Timeout: time.Hour, HeartbeatInterval: time.Hour}})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range benchPopulation {
		id, err := trust.Generate()
		if err != nil {
			b.Fatal(err)
		}
		sk := record.Skill{SkillID: fmt.Sprintf("skill-%d", i%300), Version: fmt.Sprintf("1.%d.0", i%5), SkillType: record.SkillTool,
			Endpoint: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250), Scenes: []string{fmt.Sprintf("scene-%d", i%20)}}
		for _, c := range rng.Perm(benchCaps)[:3] {
			sk.Capabilities = append(sk.Capabilities, record.Capability{ID: fmt.Sprintf("cap-%d", c), Description: "capability number " + fmt.Sprint(c)})
		}
		a := &record.Agent{AgentName: fmt.Sprintf("agent-%d", i), Description: "a benchmark agent", Capabilities: map[string]string{},
			Transport: record.Transport{Type: "tcp", Endpoint: fmt.Sprintf("10.1.%d.%d:9000", i/250, i%250)},
			Skills:    []record.Skill{sk}, Tags: []string{fmt.Sprintf("tier=%d", i%3)}}
		a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), 1, time.Now(), time.Hour)
		sa, err := id.Sign(a)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Verifier().VerifyAgent(sa, trust.VerifyOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := n.View().Learn(sa, store.SourceDHT, true); err != nil {
			b.Fatal(err)
		}
	}
	if got := n.View().Len(); got != benchPopulation {
		b.Fatalf("%d live agents, want %d", got, benchPopulation)
	}
	return n
}

// BenchmarkDiscoverCached measures GET /agents?capability=… answered from
// the live view of a node with 1 000 live agents (about 20 match): through
// the handler in process, and over a real loopback TCP listener with
// keep-alive connections (parallel clients; req/s is the throughput).
func BenchmarkDiscoverCached(b *testing.B) {
	n := liveNode(b)
	s, err := New(n.Node, Config{Version: "bench"}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	h := s.Handler()
	path := func(i int) string { return fmt.Sprintf("/agents?capability=cap-%d", i%benchCaps) }

	b.Run("handler", func(b *testing.B) {
		results := 0
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1"+path(i), nil))
			if w.Code != 200 {
				b.Fatalf("%d: %s", w.Code, w.Body.Bytes())
			}
			results += w.Body.Len()
		}
		b.ReportMetric(float64(results)/float64(b.N), "B/resp")
	})

	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	get := func(i int) error {
		resp, err := client.Get(srv.URL + path(i))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	b.Run("tcp", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := get(i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tcp-parallel", func(b *testing.B) {
		b.SetParallelism(4)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(benchCaps)
			for pb.Next() {
				if err := get(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	})
}

// BenchmarkDiscoverHosted is BenchmarkDiscoverCached on a registry: 2 000
// agents registered with the node itself (hosted, so compact: each
// answer encodes its records' canonical bytes again), 100 per capability,
// answers of up to 100, as `make bench-scale` asks.
func BenchmarkDiscoverHosted(b *testing.B) {
	n := newNode(b, nodeOpts{cfg: node.Config{Timeout: time.Hour, HeartbeatInterval: time.Hour}})
	for i := range 2000 {
		a := &record.Agent{AgentName: fmt.Sprintf("agent-%d", i), Description: "a benchmark agent of six words", Capabilities: map[string]string{},
			Transport: record.Transport{Type: "http", Endpoint: fmt.Sprintf("http://127.0.0.1:%d", 9000+i%1000)}, Tags: []string{"tag"},
			Skills: []record.Skill{{SkillID: fmt.Sprintf("s%d", i%50), Version: "1.0.0", SkillType: record.SkillTool,
				Capabilities: []record.Capability{{ID: fmt.Sprintf("cap.%d", i%20), Version: "1.0.0"}}}}}
		a.AgentID = record.ExternalAgentID("bench", a.AgentName)
		if _, err := n.Register(b.Context(), a); err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(n.Node, Config{Version: "bench"}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	h := s.Handler()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("http://127.0.0.1/agents?capability=cap.%d&limit=100", i%20), nil))
		if w.Code != 200 {
			b.Fatalf("%d: %s", w.Code, w.Body.Bytes())
		}
	}
}
