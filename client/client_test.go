package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/testnode"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newDaemon(t *testing.T, cfg api.Config) *testnode.Daemon {
	t.Helper()
	return testnode.Start(t, node.Config{LeaseCheckInterval: 20 * time.Millisecond}, cfg)
}

func agent(skill string, caps ...string) *record.Agent {
	sk := record.Skill{SkillID: skill, Version: "1.2.0", SkillType: record.SkillTool, Capabilities: nil}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	return &record.Agent{AgentName: "client-test", Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:1"},
		Skills: []record.Skill{sk}, Tags: []string{"t1"}}
}

func TestClientRoundTrip(t *testing.T) {
	d := newDaemon(t, api.Config{Version: "client-test"})
	c, err := client.New(strings.TrimPrefix(d.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	h, err := c.Health(ctx)
	if err != nil || h.AgentID != d.ID.AgentID || h.PeerID != d.ID.PeerID.String() || h.Version != "client-test" {
		t.Fatalf("health %+v %v", h, err)
	}

	events, err := c.Watch(ctx, client.WatchFilter{Capability: "cap-c"})
	if err != nil {
		t.Fatal(err)
	}

	sa, err := c.Register(ctx, agent("skill-c", "cap-c"))
	if err != nil {
		t.Fatal(err)
	}
	if sa.Agent.AgentID != d.ID.AgentID || sa.VerifySignatures() != nil {
		t.Fatalf("%+v", sa.Agent)
	}
	again, err := c.Register(ctx, agent("skill-c", "cap-c"))
	if err != nil || again.Agent.Seq != sa.Agent.Seq {
		t.Fatalf("not coalesced: %v", err)
	}

	// A record signed by the agent's own key.
	own, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	a2 := agent("skill-d", "cap-d")
	a2.Fill(uuid.NewString(), d.ID.PeerID.String(), own.PublicKeyPEM(), 1, time.Now(), time.Hour)
	signed, err := record.Sign(a2, own.AgentKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosted, err := c.RegisterSigned(ctx, signed)
	if err != nil || hosted.VerifySignatures() != nil || string(hosted.Signature) != string(signed.Signature) {
		t.Fatalf("register signed: %v", err)
	}

	found, err := c.Discover(ctx, client.Query{Capability: "cap-c", Version: ">=1.0.0", Tags: []string{"t1"}, Limit: 5})
	if err != nil || len(found) != 1 || found[0].Agent.AgentID != sa.Agent.AgentID || found[0].Source != "local" || found[0].Status != record.StatusHealthy {
		t.Fatalf("discover %+v %v", found, err)
	}
	if s, err := found[0].Signed(); err != nil || s.VerifySignatures() != nil {
		t.Fatalf("signed: %v", err)
	}
	_, err = c.Discover(ctx, client.Query{Capability: "absent"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Code != record.CodeNoSkillsFound || !client.IsNotFound(err) {
		t.Fatalf("miss: %v", err)
	}
	_, err = c.Discover(ctx, client.Query{Version: "!!"})
	if !errors.As(err, &ce) || ce.Status != 400 || ce.Field != "version" {
		t.Fatalf("bad version: %#v", err)
	}
	all, err := c.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list %d %v", len(all), err)
	}
	got, err := c.Get(ctx, hosted.Agent.AgentID)
	if err != nil || got.Agent.AgentID != hosted.Agent.AgentID {
		t.Fatalf("get %v", err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil || len(caps["cap-c"]) != 1 || caps["cap-c"][0].SkillID != "skill-c" {
		t.Fatalf("capabilities %+v %v", caps, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || peers == nil {
		t.Fatalf("peers %v %v", peers, err)
	}

	if err := c.SetStatus(ctx, sa.Agent.AgentID, record.StatusDegraded); err != nil {
		t.Fatal(err)
	}
	if err := c.SetStatus(ctx, sa.Agent.AgentID, "SLEEPY"); !errors.As(err, &ce) || ce.Field != "status" {
		t.Fatalf("bad status: %v", err)
	}
	if err := c.Unregister(ctx, sa.Agent.AgentID, record.ReasonMaintenance); err != nil {
		t.Fatal(err)
	}
	if err := c.Unregister(ctx, sa.Agent.AgentID, ""); !client.IsNotFound(err) {
		t.Fatalf("second unregister: %v", err)
	}

	want := []string{"registry.agent.registered", "registry.capability.changed", "registry.agent.status", "registry.agent.deregistered"}
	for _, w := range want {
		select {
		case ev := <-events:
			if ev.Type != w {
				t.Fatalf("event %+v, want %s", ev, w)
			}
			if w == "registry.agent.registered" && (ev.Record == nil || ev.AgentID != sa.Agent.AgentID) {
				t.Fatalf("%+v", ev)
			}
			if w == "registry.agent.deregistered" && ev.Reason != "MAINTENANCE" {
				t.Fatalf("%+v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", w)
		}
	}
}

func TestClientWatchEndsWithContext(t *testing.T) {
	d := newDaemon(t, api.Config{})
	c, _ := client.New(d.URL)
	ctx, cancel := context.WithCancel(context.Background())
	events, err := c.Watch(ctx, client.WatchFilter{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range events {
	}
	// A daemon shutting down ends the watch with an error event.
	events, err = c.Watch(t.Context(), client.WatchFilter{})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); _ = d.API.Close() }()
	var last client.Event
	for ev := range events {
		last = ev
	}
	<-closed
	if last.Type != client.EventError || last.Err == nil || last.Err.Code != record.CodeServiceUnavailable {
		t.Fatalf("last event %+v", last)
	}
	// A bad filter is refused.
	d2 := newDaemon(t, api.Config{})
	c2, _ := client.New(d2.URL)
	if _, err := c2.Watch(t.Context(), client.WatchFilter{Capability: "no spaces"}); err == nil || !strings.Contains(err.Error(), "capability") {
		t.Fatalf("bad filter: %v", err)
	}
}

func TestClientAuth(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-client"
	d := newDaemon(t, api.Config{Addr: "192.0.2.1:4778", JWTSecret: secret})
	c, _ := client.New(d.URL)
	_, err := c.List(t.Context())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 401 || ce.Code != record.CodeAuth {
		t.Fatalf("%v", err)
	}
	if _, err := c.Watch(t.Context(), client.WatchFilter{}); !errors.As(err, &ce) || ce.Status != 401 {
		t.Fatalf("watch without token: %v", err)
	}
	tok := hs256(t, secret, `{"scope":"discover:read discover:write"}`)
	c, err = client.New(d.URL, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(t.Context(), agent("s", "c")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := c.Watch(ctx, client.WatchFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(d.URL, client.WithToken("a b")); err == nil {
		t.Fatal("token with a space accepted")
	}
}

func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Health(t.Context())
	if !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("%v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, addr) || strings.Contains(msg, "\n") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("message %q", msg)
	}
	if _, err := c.Watch(t.Context(), client.WatchFilter{}); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("watch: %v", err)
	}
	for _, bad := range []string{"ftp://x", "http://", "http://[::1"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	// A server that is not agentd: the error carries the status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "teapot", http.StatusTeapot) }))
	defer srv.Close()
	c, _ = client.New(srv.URL)
	_, err = c.Health(t.Context())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTeapot || ce.Message != "teapot" {
		t.Fatalf("%#v", err)
	}
}

// A seed-000 agent that signs alone (no peer binding) registers through
// the client with a daemon in registry mode: the daemon's answer is that
// unbound record, which the client must accept as it is.
func TestClientRegisterUnbound(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-client"
	d := newDaemon(t, api.Config{JWTSecret: secret, ServeRegistry: true})
	c, err := client.New(d.URL, client.WithToken(hs256(t, secret, `{"scope":"discover:read discover:write"}`)))
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	msg := testutil.NewSeed000Agent(t, id, "metrics").Announce(t, false)
	if !record.IsSignedAnnounce(msg) {
		t.Fatal("a signed seed-000 Announce is not recognised as one")
	}
	parsed, _, err := record.ParseAnnounceUnbound(msg)
	if err != nil || !parsed.Unbound() {
		t.Fatalf("parse: %v", err)
	}
	got, err := c.RegisterSigned(t.Context(), parsed)
	if err != nil {
		t.Fatal(err)
	}
	if got.Agent.AgentID != id || !got.Unbound() || string(got.Signature) != string(parsed.Signature) {
		t.Fatalf("answer %+v", got.Agent)
	}
}
