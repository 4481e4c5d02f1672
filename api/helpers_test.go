package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
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

var hostSeq atomic.Int64

// tnode is a started node over a mocknet host with gossip and the DHT off.
type tnode struct {
	*node.Node
	id *trust.Identity
	st store.Store
}

type nodeOpts struct {
	cfg     node.Config
	mn      mocknet.Mocknet
	lan     node.LAN
	catalog node.Catalog
}

func newNode(t testing.TB, o nodeOpts) *tnode {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mn := o.mn
	if mn == nil {
		mn = mocknet.New()
		t.Cleanup(func() { _ = mn.Close() })
	}
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", hostSeq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.cfg
	if o.mn == nil {
		cfg.DisableDHT, cfg.DisableGossip = true, true
	}
	if cfg.LeaseCheckInterval == 0 {
		cfg.LeaseCheckInterval = 20 * time.Millisecond
	}
	if cfg.LookupTimeout == 0 {
		cfg.LookupTimeout = 2 * time.Second
	}
	n, err := node.New(cfg, node.Options{Identity: id, Host: h, Store: st, LAN: o.lan, Catalog: o.catalog, Logger: slog.New(slog.DiscardHandler)})
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
	return &tnode{Node: n, id: id, st: st}
}

// tapi is an API server over a test node, served by httptest.
type tapi struct {
	t   testing.TB
	n   *tnode
	s   *Server
	srv *httptest.Server
	url string
}

func newAPI(t testing.TB, cfg Config) *tapi {
	return newAPIOn(t, newNode(t, nodeOpts{}), cfg)
}

func newAPIOn(t testing.TB, n *tnode, cfg Config) *tapi {
	t.Helper()
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	s, err := New(n.Node, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	// Cleanups run last-in first-out: the API closes before the server
	// and the node.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = s.Close() })
	return &tapi{t: t, n: n, s: s, srv: srv, url: srv.URL}
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiErr decodes an error body.
func (r response) apiErr(t testing.TB) Error {
	t.Helper()
	var e Error
	r.json(t, &e)
	return e
}

type reqOpt func(*http.Request)

func withHeader(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }
func bearer(tok string) reqOpt      { return withHeader("Authorization", "Bearer "+tok) }

func (a *tapi) do(method, path string, body any, opts ...reqOpt) response {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// mustStatus fails unless the answer has the status.
func mustStatus(t testing.TB, r response, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

var waitFor = testutil.Eventually

// spec is an unsigned agent with one skill.
func spec(skill string, caps ...string) *record.Agent {
	sk := record.Skill{SkillID: skill, Version: "1.2.0", SkillType: record.SkillTool, Endpoint: "10.0.0.9:8080", Scenes: []string{"auth"}}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c, Description: "does " + c})
	}
	return &record.Agent{AgentName: "test-agent", Description: "an agent for tests", Capabilities: map[string]string{},
		Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.9:9000"}, Skills: []record.Skill{sk}, Tags: []string{"tier=core"}}
}

// announceJSON wraps an unsigned agent in an Announce.
func announceJSON(t testing.TB, a *record.Agent) []byte {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"protocol_version": record.ProtocolVersion, "agent": json.RawMessage(b)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// signedBy signs a for the node's peer with a separate agent key (a client
// that holds its own key), returning the Announce JSON.
func signedBy(t testing.TB, n *tnode, a *record.Agent, agentID string, seq uint64) (*record.SignedAgent, []byte) {
	t.Helper()
	cid, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	a.AgentID = agentID
	a.Fill(agentID, n.id.PeerID.String(), cid.PublicKeyPEM(), seq, time.Now(), time.Hour)
	sa, err := record.Sign(a, cid.AgentKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sa, sa.MarshalAnnounce()
}
