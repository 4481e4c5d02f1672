package dht

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// tlog routes slog records to t.Log.
type tlog struct {
	t     testing.TB
	attrs []slog.Attr
	mu    *sync.Mutex
	done  *bool
}

func newTestLogger(t testing.TB) *slog.Logger {
	mu, done := &sync.Mutex{}, new(bool)
	t.Cleanup(func() { mu.Lock(); *done = true; mu.Unlock() })
	return slog.New(&tlog{t: t, mu: mu, done: done})
}

func (h *tlog) Enabled(context.Context, slog.Level) bool { return testing.Verbose() }
func (h *tlog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	if !*h.done {
		h.t.Log(b.String())
	}
	return nil
}
func (h *tlog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}
func (h *tlog) WithGroup(string) slog.Handler { return h }

// fakeHosted is a hand-written Hosted: a list of records and the agent keys
// this node holds.
type fakeHosted struct {
	mu   sync.Mutex
	recs []*record.SignedAgent
	keys map[string]*trust.Identity
	// sign counts SignChallenge calls.
	sign int
}

func newFakeHosted() *fakeHosted { return &fakeHosted{keys: map[string]*trust.Identity{}} }

func (f *fakeHosted) set(recs []*record.SignedAgent, ids ...*trust.Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs = recs
	for _, id := range ids {
		f.keys[id.AgentID] = id
	}
}

func (f *fakeHosted) HostedRecords(q FetchQuery) []*record.SignedAgent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*record.SignedAgent
	for _, r := range f.recs {
		if q.Matches(&r.Agent) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeHosted) SignChallenge(agentID string, msg []byte) ([]byte, bool, error) {
	f.mu.Lock()
	id, ok := f.keys[agentID]
	f.sign++
	f.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	sig, err := record.SignBytes(id.AgentKey, msg)
	return sig, err == nil, err
}

// skillSpec is skill id → capability ids.
type skillSpec map[string][]string

// signedAgent builds and signs a record for id offering skills.
func signedAgent(t testing.TB, id *trust.Identity, seq uint64, skills skillSpec) *record.SignedAgent {
	t.Helper()
	a := &record.Agent{
		AgentID:      id.AgentID,
		Capabilities: map[string]string{},
		Transport:    record.Transport{Type: "libp2p"},
		Seq:          seq,
		IssuedAt:     time.Now().UTC().Format(time.RFC3339Nano),
		TTLSeconds:   3600,
	}
	for sk, caps := range skills {
		s := record.Skill{SkillID: sk, Version: "1.0.0", SkillType: record.SkillTool}
		for _, c := range caps {
			s.Capabilities = append(s.Capabilities, record.Capability{ID: c})
		}
		a.Skills = append(a.Skills, s)
	}
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatalf("sign agent: %v", err)
	}
	return sa
}

func mustIdentity(t testing.TB) *trust.Identity {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newVerifier(t testing.TB) *trust.Verifier {
	t.Helper()
	v, err := trust.NewVerifier(trust.Config{Policy: trust.PolicyOpen}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// node is one DHT node of a test cluster.
type node struct {
	id     *trust.Identity
	h      host.Host
	d      *DHT
	hosted *fakeHosted
	m      *metrics.Metrics
}

func (n *node) info() peer.AddrInfo { return peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()} }

// host records this node's own agent with the given skills and provides it.
func (n *node) host(t testing.TB, seq uint64, skills skillSpec) *record.SignedAgent {
	sa := signedAgent(t, n.id, seq, skills)
	n.hosted.set([]*record.SignedAgent{sa}, n.id)
	n.d.SetProvided([]*record.SignedAgent{sa})
	return sa
}

type cluster struct {
	mn    mocknet.Mocknet
	nodes []*node
}

// testConfig is a config with short timeouts for tests.
func testConfig() Config {
	return Config{
		QueryTimeout:  10 * time.Second,
		FetchTimeout:  3 * time.Second,
		RetryInterval: 100 * time.Millisecond,
	}
}

// newNode adds node i to mn with testConfig (changed by mod, if not nil);
// it is not started.
func newNode(t testing.TB, mn mocknet.Mocknet, i int, mod func(i int, c *Config)) *node {
	t.Helper()
	id := mustIdentity(t)
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip4/10.0.%d.%d/tcp/4777", i/250, i%250+1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	if mod != nil {
		mod(i, &cfg)
	}
	hosted := newFakeHosted()
	m := metrics.New(false)
	d, err := New(h, cfg, newVerifier(t), hosted, m, newTestLogger(t).With("node", i))
	if err != nil {
		t.Fatal(err)
	}
	return &node{id: id, h: h, d: d, hosted: hosted, m: m}
}

// newCluster starts n DHT nodes on a fully linked mocknet with the given
// link latency. Every node bootstraps from node 0; routing tables are then
// refreshed one node at a time (kad-dht's own tests do it sequentially).
// Everything is torn down in t.Cleanup.
func newCluster(t testing.TB, n int, latency time.Duration, mod func(i int, c *Config)) *cluster {
	t.Helper()
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: latency})
	c := &cluster{mn: mn}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if err := nd.d.Close(); err != nil {
				t.Errorf("close dht: %v", err)
			}
		}
		_ = mn.Close()
	})
	for i := range n {
		c.nodes = append(c.nodes, newNode(t, mn, i, mod))
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, nd := range c.nodes {
		if err := nd.d.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	boot := []peer.AddrInfo{c.nodes[0].info()}
	for _, nd := range c.nodes[1:] {
		if err := nd.d.Bootstrap(ctx, boot); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}
	for _, nd := range c.nodes {
		kad, _, _ := nd.d.running()
		select {
		case err := <-kad.RefreshRoutingTable():
			if err != nil {
				t.Logf("routing table refresh: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("routing table refresh timed out")
		}
	}
	return c
}

var eventually = testutil.Eventually

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func rejects(m *metrics.Metrics, reason string) float64 {
	return counterValue(m.Rejects.WithLabelValues("dht", reason))
}

func fetches(m *metrics.Metrics, outcome string) float64 {
	return counterValue(m.Fetches.WithLabelValues(outcome))
}
