package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// A node whose SkillCenter catalog is its own API must not loop: the
// catalog client marks its requests, and the API answers them from the
// live view only.
func TestCatalogPointingAtItselfDoesNotLoop(t *testing.T) {
	var handler atomic.Value
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		handler.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	cat, err := skillcenter.NewClient(srv.URL, skillcenter.Options{Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cat.Close() })
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast("/ip6/100::ca7/tcp/4242"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{DisableDHT: true, DisableGossip: true, LookupTimeout: 3 * time.Second},
		node.Options{Identity: id, Host: h, Store: st, Catalog: cat, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = st.Close() })
	s, err := New(n, Config{Version: "test"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	handler.Store(s.Handler())

	_, err = n.Discover(context.Background(), node.Query{Filter: store.Filter{Capability: "nobody.offers.this"}})
	var de *node.DiscoveryError
	if !errors.As(err, &de) {
		t.Fatalf("err %v", err)
	}
	// One resolver pass asks the catalog once (plus its retries); a loop
	// would make thousands of nested requests.
	if got := requests.Load(); got > 5 {
		t.Fatalf("%d catalog requests for one lookup: the catalog loops back into the resolver", got)
	}
}
