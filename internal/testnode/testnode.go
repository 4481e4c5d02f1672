// Package testnode starts an in-process agentd for the tests of what sits
// on top of the local API (the Go client, the CLI): a node with a fresh
// identity on a mocknet host of its own, an in-memory store, and its API
// on a loopback httptest server, all stopped by t.Cleanup.
package testnode

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// Daemon is a started node and its API.
type Daemon struct {
	Node *node.Node
	ID   *trust.Identity
	API  *api.Server
	URL  string // http://127.0.0.1:port
}

var hostSeq atomic.Int64

// Start starts a node with nc (DHT and gossip off: it has no peers) and
// serves its API with ac.
func Start(t testing.TB, nc node.Config, ac api.Config) *Daemon {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	// Each host its own /48: go-libp2p rate-limits identify per /56.
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/2001:db8:%x::1/tcp/4242", hostSeq.Add(1)&0xffff)))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	nc.DisableDHT, nc.DisableGossip = true, true
	n, err := node.New(nc, node.Options{Identity: id, Host: h, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = st.Close() })
	s, err := api.New(n, ac, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = s.Close() })
	return &Daemon{Node: n, ID: id, API: s, URL: srv.URL}
}
