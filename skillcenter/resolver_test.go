package skillcenter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

var hostSeq atomic.Int64

// startNode starts a node over a fresh mocknet (no peers), with the DHT
// and gossip on, and the catalog when given.
func startNode(t *testing.T, cfg node.Config, cat node.Catalog) *node.Node {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", hostSeq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LookupTimeout == 0 {
		cfg.LookupTimeout = 5 * time.Second
	}
	n, err := node.New(cfg, node.Options{Identity: id, Host: h, Store: st, Catalog: cat, Logger: skillcenter.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = st.Close()
	})
	return n
}

// serveMirror serves a mirror of the seed-001 catalog.
func serveMirror(t *testing.T, o skillcenter.ServerOptions) (*skillcenter.Server, *httptest.Server) {
	t.Helper()
	cat, err := skillcenter.LoadCatalog(skillcenter.SeedCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	o.Logger = skillcenter.TestLogger(t)
	s, err := skillcenter.NewServer(cat, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv
}

func newClient(t *testing.T, url string, clk *skillcenter.Clock) *skillcenter.Client {
	t.Helper()
	c, err := skillcenter.NewClient(url, skillcenter.Options{Now: clk.Now, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Retries: 1, Logger: skillcenter.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func discoveryCode(err error) string {
	var de *node.DiscoveryError
	if errors.As(err, &de) {
		return de.Code
	}
	return ""
}

// apiGet asks the node's API (served by httptest) and decodes the answer.
func apiGet(t *testing.T, url string) (int, api.AgentList, api.Error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var l api.AgentList
	var e api.Error
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	} else {
		_ = json.Unmarshal(b, &e)
	}
	return resp.StatusCode, l, e
}

// TestFallbackOrder runs the resolver's fallback order end to end, in
// process: a node with no peer falls through to a running mirror (source
// skillcenter); with the mirror down the same query answers from the
// client's expired cache, stale; with nothing cached and the mirror down
// there is no answer, and a query the mirror does not know is DISC_002.
func TestFallbackOrder(t *testing.T) {
	clk := skillcenter.NewClock()
	_, srv := serveMirror(t, skillcenter.ServerOptions{})
	c := newClient(t, srv.URL, clk)
	n := startNode(t, node.Config{}, c)
	a, err := api.New(n, api.Config{Version: "test"}, skillcenter.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(a.Handler())
	t.Cleanup(apiSrv.Close)
	t.Cleanup(func() { _ = a.Close() })
	ctx := context.Background()
	q := node.Query{Filter: store.Filter{Capability: "user-auth", Scene: "auth"}}

	// 1. No peer: local view, LAN (none), DHT (no peer) find nothing; the
	// catalog answers.
	res, err := n.Discover(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Source != store.SourceSkillCenter || r.Stale || r.Record != nil || r.Agent == nil {
			t.Fatalf("result %+v", r)
		}
	}
	if res[0].Agent.AgentID != record.ExternalAgentID(skillcenter.Namespace, "skill-org-dingding") ||
		res[1].Agent.Skills[0].SkillID != "skill-org-feishu" {
		t.Fatalf("agents %s %s", res[0].Agent.AgentID, res[1].Agent.Skills[0].SkillID)
	}
	status, l, _ := apiGet(t, apiSrv.URL+"/agents?capability=user-auth")
	if status != 200 || l.Total != 2 || l.Agents[0].Source != "skillcenter" || l.Agents[0].Stale || l.Agents[0].Signature != "" {
		t.Fatalf("API: %d %+v", status, l)
	}
	// A skill id goes to GET /api/skills/{id}; the filter still applies.
	res, err = n.Discover(ctx, node.Query{Filter: store.Filter{Skill: "skill-org-feishu", Version: ">=0.7.0"}})
	if err != nil || len(res) != 1 || res[0].Source != store.SourceSkillCenter {
		t.Fatalf("by skill: %+v %v", res, err)
	}
	res, err = n.Discover(ctx, node.Query{Filter: store.Filter{Skill: "skill-org-feishu", Version: ">=1.0.0"}})
	if discoveryCode(err) != record.CodeNoSkillsFound {
		t.Fatalf("by skill, other version: %+v %v", res, err)
	}
	// A capability the catalog does not know: DISC_002.
	if _, err := n.Discover(ctx, node.Query{Filter: store.Filter{Capability: "no-such-capability"}}); discoveryCode(err) != record.CodeNoSkillsFound {
		t.Fatalf("unknown capability: %v", err)
	}

	// 2. The mirror goes away and the cached answers expire: the same
	// query answers from the expired cache, stale.
	srv.Close()
	clk.Advance(301 * time.Second)
	res, err = n.Discover(ctx, q)
	if err != nil || len(res) != 2 {
		t.Fatalf("stale: %+v %v", res, err)
	}
	for _, r := range res {
		if !r.Stale || r.Source != store.SourceSkillCenter || r.Age < 300*time.Second {
			t.Fatalf("stale result %+v", r)
		}
	}
	status, l, _ = apiGet(t, apiSrv.URL+"/agents?capability=user-auth&include_stale=true")
	if status != 200 || l.Total != 2 || !l.Agents[0].Stale || l.Agents[1].AgeMS < 300_000 || l.Agents[0].Source != "skillcenter" {
		t.Fatalf("API stale: %d %+v", status, l)
	}
	// Without include_stale the API says only stale entries match.
	if status, _, e := apiGet(t, apiSrv.URL+"/agents?capability=user-auth"); status != 404 || !strings.Contains(e.Message, "include_stale") {
		t.Fatalf("API without include_stale: %d %+v", status, e)
	}
	// Another query that matches cached skills is answered from them too.
	res, err = n.Discover(ctx, node.Query{Filter: store.Filter{Text: "dingtalk"}})
	if err != nil || len(res) != 1 || !res[0].Stale {
		t.Fatalf("other query, stale: %+v %v", res, err)
	}

	// 3. Nothing cached (a fresh client) and no mirror: nothing answers.
	// The catalog failed and no peer is reachable: DISC_005.
	n2 := startNode(t, node.Config{}, newClient(t, srv.URL, clk))
	_, err = n2.Discover(ctx, q)
	if code := discoveryCode(err); code != record.CodeNetworkError {
		t.Fatalf("nothing, mirror down: %v", err)
	}
	// Nothing configured and nothing found: DISC_002.
	n3 := startNode(t, node.Config{}, nil)
	if _, err := n3.Discover(ctx, q); discoveryCode(err) != record.CodeNoSkillsFound {
		t.Fatalf("nothing at all: %v", err)
	}
}

// TestFallbackRegistersWithAgentdRegistry runs the registry fallback
// against a real agentd API in registry mode (api.Config.ServeRegistry):
// while the local node has no peer its agent is registered there and kept
// alive; a third node whose catalog is that agentd finds it through the
// SkillCenter step; once P2P works the updates stop and the registry lets
// the agent go.
func TestFallbackRegistersWithAgentdRegistry(t *testing.T) {
	ctx := context.Background()
	reg := startNode(t, node.Config{HeartbeatInterval: 100 * time.Millisecond, Timeout: 600 * time.Millisecond}, nil)
	ra, err := api.New(reg, api.Config{Version: "test", ServeRegistry: true, JWTSecret: skillcenter.TestSecret}, skillcenter.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	regSrv := httptest.NewServer(ra.Handler())
	t.Cleanup(regSrv.Close)
	t.Cleanup(func() { _ = ra.Close() })

	local := startNode(t, node.Config{}, nil)
	sk := record.Skill{SkillID: "offline-skill", Version: "1.0.0", SkillType: record.SkillTool, Capabilities: []record.Capability{{ID: "cap-offline"}}}
	sa, err := local.Register(ctx, &record.Agent{Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "10.1.1.1:9000"}, Skills: []record.Skill{sk}})
	if err != nil {
		t.Fatal(err)
	}
	var p2p atomic.Bool
	f, err := skillcenter.NewFallback(skillcenter.FallbackConfig{
		URL: regSrv.URL, Token: skillcenter.Token(t, skillcenter.ScopeWrite, time.Hour),
		Interval: 50 * time.Millisecond, Logger: skillcenter.TestLogger(t),
	}, skillcenter.FallbackDeps{Locals: local.Locals, P2PWorks: p2p.Load})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })

	id := sa.Agent.AgentID
	skillcenter.WaitFor(t, 10*time.Second, "the registration", func() bool {
		a, ok := reg.View().Get(id)
		return ok && a.Source == store.SourceRegistry
	})
	// Kept alive and healthy through 30 refreshes (1.5 s at 50 ms, more
	// than two registry timeouts of 600 ms).
	start := f.Status().Posts
	skillcenter.WaitFor(t, 20*time.Second, "30 refreshes", func() bool {
		a, ok := reg.View().Get(id)
		if !ok || a.Status != record.StatusHealthy {
			t.Fatalf("the registration lapsed or went %s while the fallback ran", a.Status)
		}
		return f.Status().Posts >= start+30
	})

	// A node without P2P whose catalog is the registry finds the agent.
	finder := startNode(t, node.Config{}, newClient(t, regSrv.URL, skillcenter.NewClock()))
	res, err := finder.Discover(ctx, node.Query{Filter: store.Filter{Capability: "cap-offline"}})
	if err != nil || len(res) != 1 || res[0].Source != store.SourceSkillCenter || res[0].Agent.Skills[0].SkillID != "offline-skill" {
		t.Fatalf("through the registry's SkillCenter API: %+v %v", res, err)
	}

	// P2P works again: the updates stop, the registry drops the agent.
	p2p.Store(true)
	skillcenter.WaitFor(t, 10*time.Second, "the fallback to stop", func() bool { return !f.Status().Active })
	skillcenter.WaitFor(t, 10*time.Second, "the registry to drop the agent", func() bool {
		_, ok := reg.View().Get(id)
		return !ok
	})
	if st := f.Status(); st.LastError != "" || st.Posts == 0 {
		t.Fatalf("status %+v", st)
	}
}
