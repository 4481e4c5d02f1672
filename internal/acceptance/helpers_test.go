package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/lan"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logOut receives the nodes' logs; io.Discard keeps test output short.
var logOut io.Writer = io.Discard

// bubble runs f in virtual time. Under -race the bubble runs with
// GOMAXPROCS(1), as go-libp2p-pubsub's own tests do (golang/go#78156).
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

var waitFor = testutil.Eventually

// ---- a CA and certified identities ----

type pki struct {
	t  *testing.T
	ca *trust.CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := trust.InitCA(filepath.Join(t.TempDir(), "ca"), trust.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, ca: ca}
}

// certify issues a certificate for id's agent key and installs it in id
// (so every record id signs carries it). It returns the leaf.
func (p *pki) certify(id *trust.Identity) []byte {
	p.t.Helper()
	csr, err := trust.CreateCSR(id, "")
	if err != nil {
		p.t.Fatal(err)
	}
	req, err := trust.ParseCSRPEM(csr)
	if err != nil {
		p.t.Fatal(err)
	}
	_, bundle, err := p.ca.Issue(req, trust.IssueOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	id.Certificate = string(bundle)
	return bundle
}

// revoke revokes the certificate installed in id.
func (p *pki) revoke(id *trust.Identity) {
	p.t.Helper()
	certs, err := record.ParseCertificatesPEM(id.Certificate)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.ca.Revoke(certs[0].SerialNumber, time.Now(), 0); err != nil {
		p.t.Fatal(err)
	}
}

// store loads a trust store that trusts the CA, with its CRLs.
func (p *pki) store() *trust.Store {
	p.t.Helper()
	s, err := trust.LoadStore(p.ca.StoreConfig())
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func newIdentity(t *testing.T) *trust.Identity {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// ---- nodes on a mocknet ----

type tnode struct {
	*node.Node
	id *trust.Identity
	st store.Store
	m  *metrics.Metrics
}

type tnet struct {
	t     *testing.T
	mn    mocknet.Mocknet
	nodes []*tnode
}

func newNet(t *testing.T) *tnet {
	t.Helper()
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: 20 * time.Millisecond})
	tn := &tnet{t: t, mn: mn}
	t.Cleanup(func() {
		for _, nd := range tn.nodes {
			_ = nd.Close()
			_ = nd.st.Close()
		}
		_ = mn.Close()
	})
	return tn
}

// add starts a node for id with the trust configuration tc and the chain
// verifier chain (nil for none); st may be an existing store (a restart).
// Every node but the first bootstraps through the first.
func (tn *tnet) add(id *trust.Identity, tc trust.Config, chain trust.ChainVerifier, st store.Store) *tnode {
	t := tn.t
	t.Helper()
	var err error
	if st == nil {
		if st, err = store.Open(store.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	h := tn.mn.Host(id.PeerID)
	if h != nil {
		// A restart: mocknet cannot remove a peer, so drop the old
		// host's connections and reuse it.
		for _, c := range h.Network().Conns() {
			_ = c.Close()
		}
	} else {
		h, err = tn.mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", len(tn.nodes)+1)))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	n := tn.start(id, tc, chain, st, h)
	tn.nodes = append(tn.nodes, n)
	return n
}

// start builds and starts a node on host h.
func (tn *tnet) start(id *trust.Identity, tc trust.Config, chain trust.ChainVerifier, st store.Store, h host.Host) *tnode {
	t := tn.t
	t.Helper()
	cfg := node.Config{Trust: tc, Scope: node.ScopeFull}
	if len(tn.nodes) > 0 {
		b := tn.nodes[0].Host()
		cfg.Bootstrap = []peer.AddrInfo{{ID: b.ID(), Addrs: b.Addrs()}}
	}
	m := metrics.New(false)
	nd, err := node.New(cfg, node.Options{Identity: id, Host: h, Store: st, Chain: chain, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &tnode{Node: nd, id: id, st: st, m: m}
}

// restart stops n and starts a node for id (the same peer key) on its
// host and store, as a daemon restarted with a new agent key. The host is
// cut off from the others until the new node runs, so that every
// connection it gets is served by the new node's protocols (mocknet reuses
// the host object; a real restart starts with no connection at all).
func (tn *tnet) restart(n *tnode, id *trust.Identity, tc trust.Config, chain trust.ChainVerifier) *tnode {
	t := tn.t
	t.Helper()
	tn.stop(n)
	h := n.Host()
	for _, o := range tn.nodes {
		if err := tn.mn.UnlinkPeers(h.ID(), o.Host().ID()); err != nil {
			t.Fatal(err)
		}
		_ = tn.mn.DisconnectPeers(h.ID(), o.Host().ID())
	}
	for _, o := range tn.nodes {
		waitFor(t, 10*time.Second, "the peers notice the stop", func() bool {
			return o.Gossip() == nil || !slices.Contains(o.Gossip().TopicPeers(), h.ID())
		})
	}
	nn := tn.start(id, tc, chain, n.st, h)
	if err := tn.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	for _, o := range tn.nodes {
		if err := h.Connect(context.Background(), peer.AddrInfo{ID: o.Host().ID(), Addrs: o.Host().Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	tn.nodes = append(tn.nodes, nn)
	return nn
}

// stop closes a node (a crash or a stop for maintenance, not a graceful
// leave) and forgets it; its store stays open for a restart.
func (tn *tnet) stop(n *tnode) {
	tn.t.Helper()
	if err := n.Close(); err != nil {
		tn.t.Fatal(err)
	}
	tn.nodes = slices.DeleteFunc(tn.nodes, func(x *tnode) bool { return x == n })
}

// meshed waits until every node has a gossip peer.
func (tn *tnet) meshed() {
	tn.t.Helper()
	waitFor(tn.t, 20*time.Second, "gossip mesh", func() bool {
		for _, nd := range tn.nodes {
			if g := nd.Gossip(); g == nil || len(g.TopicPeers()) == 0 {
				return false
			}
		}
		return true
	})
}

func spec(skill string, caps ...string) *record.Agent {
	sk := record.Skill{SkillID: skill, Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "10.0.0.9:8080"}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	return &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.9:9000"}, Skills: []record.Skill{sk}}
}

// signed makes a record of id signed by its agent key (with its
// certificate, if any), naming the peer that will host it and co-sign it,
// as an agent's own client does before POSTing an Announce.
func signed(t *testing.T, id *trust.Identity, hostPeer peer.ID, a *record.Agent, seq uint64) *record.SignedAgent {
	t.Helper()
	a.Certificate = id.Certificate
	a.Fill(id.AgentID, hostPeer.String(), id.PublicKeyPEM(), seq, time.Now(), time.Hour)
	sa, err := record.Sign(a, id.AgentKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// apiError is the body of an API error (seed 000 §8.3).
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// postAnnounce POSTs a signed Announce to the node's local API (on
// loopback, no token) and returns the status and the error body.
func (n *tnode) postAnnounce(t *testing.T, sa *record.SignedAgent) (int, apiError) {
	t.Helper()
	s, err := api.New(n.Node, api.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/agents", bytes.NewReader(sa.MarshalAnnounce()))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	var e apiError
	if rec.Code != http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("error body %q: %v", rec.Body.String(), err)
		}
	}
	return rec.Code, e
}

func (n *tnode) rejects(transport string, reason trust.Reason) float64 {
	return counterValue(n.m.Rejects.WithLabelValues(transport, string(reason)))
}

func (n *tnode) live(agentID string) bool {
	_, ok := n.View().Get(agentID)
	return ok
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func wantReason(t *testing.T, err error, r trust.Reason) {
	t.Helper()
	if r == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	var re *trust.RejectError
	if !errors.As(err, &re) || re.Reason != r {
		t.Fatalf("got %v, want rejection %q", err, r)
	}
}

// ---- LAN on an in-memory multicast network ----

type datagram struct {
	b   []byte
	src netip.AddrPort
}

// memNet delivers datagrams between memSocks: a multicast reaches every
// socket bound to the port (the sender's too), a unicast the sockets of
// the destination address. It also serves Fetch: the records each peer
// hosts.
type memNet struct {
	mu    sync.Mutex
	socks map[uint16][]*memSock
	peers map[peer.ID]func() []*record.SignedAgent
}

func newMemNet() *memNet {
	return &memNet{socks: map[uint16][]*memSock{}, peers: map[peer.ID]func() []*record.SignedAgent{}}
}

type memHost struct {
	net *memNet
	ip  netip.Addr
}

func (h *memHost) ListenMulticast(group netip.AddrPort, _ string, _ int) (lan.Socket, error) {
	s := &memSock{h: h, group: group, ch: make(chan datagram, 1024), closed: make(chan struct{})}
	h.net.mu.Lock()
	h.net.socks[group.Port()] = append(h.net.socks[group.Port()], s)
	h.net.mu.Unlock()
	return s, nil
}

type memSock struct {
	h      *memHost
	group  netip.AddrPort
	ch     chan datagram
	closed chan struct{}
	once   sync.Once
}

func (s *memSock) ReadFrom(b []byte) (int, netip.AddrPort, int, error) {
	select {
	case d := <-s.ch:
		return copy(b, d.b), d.src, 1, nil
	case <-s.closed:
		return 0, netip.AddrPort{}, 0, net.ErrClosed
	}
}

func (n *memNet) send(port uint16, b []byte, src netip.AddrPort, to func(*memSock) bool) {
	n.mu.Lock()
	targets := slices.Clone(n.socks[port])
	n.mu.Unlock()
	for _, s := range targets {
		if !to(s) {
			continue
		}
		select {
		case <-s.closed:
		case s.ch <- datagram{b: slices.Clone(b), src: src}:
		default: // a full buffer drops, as the kernel's does
		}
	}
}

func (s *memSock) Multicast(b []byte, _ int) error {
	select {
	case <-s.closed:
		return net.ErrClosed
	default:
	}
	s.h.net.send(s.group.Port(), b, netip.AddrPortFrom(s.h.ip, s.group.Port()), func(*memSock) bool { return true })
	return nil
}

func (s *memSock) WriteTo(b []byte, dst netip.AddrPort, _ int) error {
	s.h.net.send(dst.Port(), b, netip.AddrPortFrom(s.h.ip, s.group.Port()), func(o *memSock) bool { return o.h.ip == dst.Addr() })
	return nil
}

func (s *memSock) LocalAddrs(int) []netip.Addr { return []netip.Addr{s.h.ip} }
func (s *memSock) Interfaces() []int           { return []int{1} }
func (s *memSock) Sync() error                 { return nil }

func (s *memSock) Close() error {
	s.once.Do(func() {
		close(s.closed)
		n := s.h.net
		n.mu.Lock()
		n.socks[s.group.Port()] = slices.DeleteFunc(n.socks[s.group.Port()], func(o *memSock) bool { return o == s })
		n.mu.Unlock()
	})
	return nil
}

func (n *memNet) fetch(_ context.Context, p peer.AddrInfo, agentID string) ([]*record.SignedAgent, error) {
	n.mu.Lock()
	f, ok := n.peers[p.ID]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("peer %s unreachable", p.ID)
	}
	var out []*record.SignedAgent
	for _, sa := range f() {
		if agentID == "" || sa.Agent.AgentID == agentID {
			out = append(out, sa)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no records")
	}
	return out, nil
}

// lanNode is one host on the memNet running LAN discovery with its own
// verifier; it hosts at most one record and remembers what it learnt.
type lanNode struct {
	t   *testing.T
	id  *trust.Identity
	ver *trust.Verifier
	m   *metrics.Metrics
	lan *lan.LAN

	mu      sync.Mutex
	locals  []*record.SignedAgent
	learned map[string]*record.SignedAgent
}

func newLANNode(t *testing.T, n *memNet, ip string, id *trust.Identity, tc trust.Config) *lanNode {
	t.Helper()
	ver, err := trust.NewVerifier(tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := &lanNode{t: t, id: id, ver: ver, m: metrics.New(false), learned: map[string]*record.SignedAgent{}}
	cfg := lan.FromConfig(config.Default().Discovery)
	cfg.Port = 4777
	locals := func() []*record.SignedAgent {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return slices.Clone(ln.locals)
	}
	l, err := lan.New(cfg, lan.Deps{
		Identity: id, Verifier: ver, Metrics: ln.m, Net: &memHost{net: n, ip: netip.MustParseAddr(ip)},
		Logger: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Locals: locals,
		Learn: func(sa *record.SignedAgent) {
			ln.mu.Lock()
			ln.learned[sa.Agent.AgentID] = sa
			ln.mu.Unlock()
		},
		Fetch: n.fetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln.lan = l
	n.mu.Lock()
	n.peers[id.PeerID] = locals
	n.mu.Unlock()
	t.Cleanup(func() { _ = l.Close() })
	return ln
}

// host signs a record of the node's identity (with its certificate, if
// any) and advertises it.
func (ln *lanNode) host(skill, capability string) *record.SignedAgent {
	ln.t.Helper()
	a := spec(skill, capability)
	a.Fill(ln.id.AgentID, ln.id.PeerID.String(), ln.id.PublicKeyPEM(), 1, time.Now(), time.Hour)
	sa, err := ln.id.Sign(a)
	if err != nil {
		ln.t.Fatal(err)
	}
	ln.mu.Lock()
	ln.locals = []*record.SignedAgent{sa}
	ln.mu.Unlock()
	return sa
}

func (ln *lanNode) start() {
	ln.t.Helper()
	if err := ln.lan.Start(context.Background()); err != nil {
		ln.t.Fatal(err)
	}
}

func (ln *lanNode) knows(agentID string) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.learned[agentID] != nil
}

// lanRejects sums the LAN's rejections with reason r over both mechanisms.
func (ln *lanNode) lanRejects(r trust.Reason) float64 {
	return counterValue(ln.m.Rejects.WithLabelValues("udp", string(r))) + counterValue(ln.m.Rejects.WithLabelValues("mdns", string(r)))
}
