package lan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	// The agentd binary the CLI tests built goes with the test binary
	// (60 MB in the temporary directory per run otherwise).
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if agentdPath != "" {
			_ = os.RemoveAll(filepath.Dir(agentdPath))
		}
	}))
}

// bubble runs f in virtual time (testing/synctest). Under -race the bubble
// runs with GOMAXPROCS(1), as go-libp2p-pubsub's own tests do
// (golang/go#78156).
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

// ---- an in-memory multicast network ----

type datagram struct {
	b       []byte
	src     netip.AddrPort
	ifIndex int
}

// memNet delivers datagrams between memSockets: a multicast reaches every
// socket bound to the group's port (the sender's too: loopback is on), a
// unicast the sockets of the destination address.
type memNet struct {
	mu    sync.Mutex
	socks map[uint16][]*memSock
	// peers serves Fetch: the records each libp2p peer hosts.
	peers map[peer.ID]func() []*record.SignedAgent
	// drop, when set, drops a datagram (true) before delivery.
	drop func(b []byte, src netip.AddrPort) bool
	// failing is how many more fetches from a peer fail (failFetches).
	failing map[peer.ID]int
}

// failFetches makes the next k fetches from p fail, as a dial that lost a
// race does.
func (n *memNet) failFetches(p peer.ID, k int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failing == nil {
		n.failing = map[peer.ID]int{}
	}
	n.failing[p] = k
}

func newMemNet() *memNet {
	return &memNet{socks: map[uint16][]*memSock{}, peers: map[peer.ID]func() []*record.SignedAgent{}}
}

// host is one machine on the network.
func (n *memNet) host(ip string) *memHost {
	return &memHost{net: n, ip: netip.MustParseAddr(ip)}
}

type memHost struct {
	net *memNet
	ip  netip.Addr

	mu   sync.Mutex
	fail error // ListenMulticast and Sync fail with it
}

func (h *memHost) setFail(err error) {
	h.mu.Lock()
	h.fail = err
	h.mu.Unlock()
}

func (h *memHost) ListenMulticast(group netip.AddrPort, ifName string, ttl int) (Socket, error) {
	h.mu.Lock()
	fail := h.fail
	h.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
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
		return copy(b, d.b), d.src, d.ifIndex, nil
	case <-s.closed:
		return 0, netip.AddrPort{}, 0, net.ErrClosed
	}
}

func (s *memSock) deliver(b []byte, src netip.AddrPort) {
	select {
	case <-s.closed:
		return
	default:
	}
	select {
	case s.ch <- datagram{b: slices.Clone(b), src: src, ifIndex: 1}:
	default: // a full receive buffer drops, as the kernel's does
	}
}

func (n *memNet) setDrop(f func(b []byte, src netip.AddrPort) bool) {
	n.mu.Lock()
	n.drop = f
	n.mu.Unlock()
}

func (n *memNet) send(port uint16, b []byte, src netip.AddrPort, to func(*memSock) bool) {
	n.mu.Lock()
	drop := n.drop
	targets := slices.Clone(n.socks[port])
	n.mu.Unlock()
	if drop != nil && drop(b, src) {
		return
	}
	for _, s := range targets {
		if to(s) {
			s.deliver(b, src)
		}
	}
}

func (s *memSock) Multicast(b []byte, ifIndex int) error {
	select {
	case <-s.closed:
		return net.ErrClosed
	default:
	}
	s.h.net.send(s.group.Port(), b, netip.AddrPortFrom(s.h.ip, s.group.Port()), func(*memSock) bool { return true })
	return nil
}

func (s *memSock) WriteTo(b []byte, dst netip.AddrPort, ifIndex int) error {
	s.h.net.send(dst.Port(), b, netip.AddrPortFrom(s.h.ip, s.group.Port()), func(o *memSock) bool { return o.h.ip == dst.Addr() })
	return nil
}

func (s *memSock) LocalAddrs(int) []netip.Addr { return []netip.Addr{s.h.ip} }
func (s *memSock) Interfaces() []int           { return []int{1} }

func (s *memSock) Sync() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.h.fail
}

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

// sniff opens a socket that records everything sent on port.
func (n *memNet) sniff(t *testing.T, ip string, port uint16) *memSock {
	t.Helper()
	s, err := n.host(ip).ListenMulticast(netip.AddrPortFrom(netip.MustParseAddr("224.0.0.1"), port), "", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.(*memSock)
}

// next returns the next datagram the sniffer saw whose text starts with
// prefix, or fails after d.
func (s *memSock) next(t *testing.T, prefix string, d time.Duration) datagram {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case dg := <-s.ch:
			if strings.HasPrefix(string(dg.b), prefix) {
				return dg
			}
		case <-tm.C:
			t.Fatalf("no %q datagram within %s", prefix, d)
		}
	}
}

// fetch is the Deps.Fetch of the memNet: the peer's hosted records.
func (n *memNet) fetch(ctx context.Context, p peer.AddrInfo, agentID string) ([]*record.SignedAgent, error) {
	n.mu.Lock()
	f, ok := n.peers[p.ID]
	failing := n.failing[p.ID] > 0
	if failing {
		n.failing[p.ID]--
	}
	n.mu.Unlock()
	if !ok || failing {
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

// ---- a node around one LAN ----

type tnode struct {
	t   *testing.T
	net *memNet
	h   *memHost
	id  *trust.Identity
	ver *trust.Verifier
	m   *metrics.Metrics
	lan *LAN

	mu      sync.Mutex
	locals  []*record.SignedAgent
	learned map[string]*record.SignedAgent
	forgot  []string
	status  map[string]record.Status
	// unboundLearns counts LearnUnbound calls that verified.
	unboundLearns int
	// known is what Resolve returns (the node's view and DHT).
	known map[string]*record.SignedAgent
}

// testConfig is the default configuration with both mechanisms on.
func testConfig() Config {
	c := FromConfig(config.Default().Discovery)
	c.Port = 4777
	return c
}

// newNode starts a LAN on host ip of n. mod may change the configuration.
func newNode(t *testing.T, n *memNet, ip string, mod func(*Config)) *tnode {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ver, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := &tnode{t: t, net: n, h: n.host(ip), id: id, ver: ver, m: metrics.New(false),
		learned: map[string]*record.SignedAgent{}, status: map[string]record.Status{}, known: map[string]*record.SignedAgent{}}
	cfg := testConfig()
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg, Deps{
		Identity: id, Verifier: ver, Metrics: tn.m, Net: tn.h,
		Logger: slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Locals: func() []*record.SignedAgent {
			tn.mu.Lock()
			defer tn.mu.Unlock()
			return slices.Clone(tn.locals)
		},
		Learn: func(sa *record.SignedAgent) {
			tn.mu.Lock()
			tn.learned[sa.Agent.AgentID] = sa
			tn.mu.Unlock()
		},
		LearnUnbound: func(sa *record.SignedAgent) error {
			st, err := sa.StampUnbound(time.Now(), time.Hour)
			if err != nil {
				return err
			}
			if err := ver.VerifyAgent(st, trust.VerifyOptions{AllowUnbound: true}); err != nil {
				return err
			}
			tn.mu.Lock()
			tn.learned[sa.Agent.AgentID] = st
			tn.unboundLearns++
			tn.mu.Unlock()
			return nil
		},
		Forget: func(id string) {
			tn.mu.Lock()
			tn.forgot = append(tn.forgot, id)
			delete(tn.learned, id)
			tn.mu.Unlock()
		},
		Status: func(id string, st record.Status) {
			tn.mu.Lock()
			tn.status[id] = st
			tn.mu.Unlock()
		},
		Resolve: func(ctx context.Context, agentID string) (*record.SignedAgent, error) {
			tn.mu.Lock()
			defer tn.mu.Unlock()
			if sa, ok := tn.known[agentID]; ok {
				return sa, nil
			}
			return nil, errors.New("not found")
		},
		Fetch: n.fetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.lan = l
	n.mu.Lock()
	n.peers[id.PeerID] = func() []*record.SignedAgent {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		return slices.Clone(tn.locals)
	}
	n.mu.Unlock()
	t.Cleanup(func() { _ = l.Close() })
	return tn
}

// withNet rebuilds the node's LAN on another Network (before start).
func (tn *tnode) withNet(nw Network) *tnode {
	tn.t.Helper()
	d := tn.lan.d
	d.Net = nw
	cfg := tn.lan.cfg
	l, err := New(cfg, d)
	if err != nil {
		tn.t.Fatal(err)
	}
	_ = tn.lan.Close()
	tn.lan = l
	tn.t.Cleanup(func() { _ = l.Close() })
	return tn
}

func (tn *tnode) start() *tnode {
	tn.t.Helper()
	if err := tn.lan.Start(context.Background()); err != nil {
		tn.t.Fatal(err)
	}
	return tn
}

// startInOrder starts the nodes one after the other, each once the one
// before it listens (in a bubble). Start opens its sockets in the
// background: without the wait, the node started second would now and
// then send its first registrations before the first one listens, and the
// first would hear of its agents only at the next heartbeat (5 s), as a
// daemon that joins a LAN later does.
func startInOrder(ns ...*tnode) {
	for _, n := range ns {
		n.start()
		synctestWait()
	}
}

// host signs a record for this node's identity with the given skills and
// adds it to the hosted records.
func (tn *tnode) host(name string, seq uint64, skills ...record.Skill) *record.SignedAgent {
	tn.t.Helper()
	a := &record.Agent{AgentName: name, Transport: record.Transport{Type: "tcp", Endpoint: tn.h.ip.String() + ":9000"}, Skills: skills}
	a.Fill(tn.id.AgentID, tn.id.PeerID.String(), tn.id.PublicKeyPEM(), seq, time.Now(), time.Hour)
	sa, err := tn.id.Sign(a)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.mu.Lock()
	tn.locals = slices.DeleteFunc(tn.locals, func(x *record.SignedAgent) bool { return x.Agent.AgentID == sa.Agent.AgentID })
	tn.locals = append(tn.locals, sa)
	tn.mu.Unlock()
	return sa
}

func skill(id string, typ record.SkillType, scenes []string, caps ...string) record.Skill {
	s := record.Skill{SkillID: id, Version: "1.0.0", SkillType: typ, Endpoint: "10.9.9.9:8080", Scenes: scenes}
	for _, c := range caps {
		s.Capabilities = append(s.Capabilities, record.Capability{ID: c})
	}
	return s
}

func (tn *tnode) learnedRec(id string) *record.SignedAgent {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.learned[id]
}

func (tn *tnode) forgotten(id string) int {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	n := 0
	for _, f := range tn.forgot {
		if f == id {
			n++
		}
	}
	return n
}

func (tn *tnode) counter(mech, outcome string) float64 {
	return counterValue(tn.m.LANPackets.WithLabelValues(mech, outcome))
}

func (tn *tnode) rejects(transport, reason string) float64 {
	return counterValue(tn.m.Rejects.WithLabelValues(transport, reason))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

var eventually = testutil.Eventually

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// synctestWait waits until every goroutine of the bubble is blocked.
func synctestWait() { synctest.Wait() }

func newIdentity(t *testing.T) *trust.Identity {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newVerifier(t *testing.T) *trust.Verifier {
	t.Helper()
	v, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
