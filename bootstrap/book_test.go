package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		// The child process of TestManyAgentsOnOneIP runs real TCP hosts
		// whose transports keep process-wide workers; its parent checks
		// leaks for the package.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/ipfs/go-log/v2/writer.(*MirrorWriter).logRoutine"),
	)
}

// memPeers is an in-memory PeerStore, the twin of store.Store's address book.
type memPeers struct {
	mu sync.Mutex
	m  map[peer.ID]store.PeerRecord
}

func newMemPeers() *memPeers { return &memPeers{m: map[peer.ID]store.PeerRecord{}} }

func (s *memPeers) PutPeer(_ context.Context, p store.PeerRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[p.ID] = p
	return nil
}

func (s *memPeers) Peers(context.Context) ([]store.PeerRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.PeerRecord, 0, len(s.m))
	for _, p := range s.m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b store.PeerRecord) int { return b.LastSeen.Compare(a.LastSeen) })
	return out, nil
}

func (s *memPeers) has(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[p]
	return ok && len(r.Addrs) > 0
}

var eventually = testutil.Eventually

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type member struct {
	id  *trust.Identity
	h   host.Host
	d   *dht.DHT
	hst *hosted
}

// hosted serves one record with its agent key.
type hosted struct {
	mu sync.Mutex
	sa *record.SignedAgent
	id *trust.Identity
}

func (h *hosted) HostedRecords(q dht.FetchQuery) []*record.SignedAgent {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sa == nil || !q.Matches(&h.sa.Agent) {
		return nil
	}
	return []*record.SignedAgent{h.sa}
}

func (h *hosted) SignChallenge(agentID string, msg []byte) ([]byte, bool, error) {
	if h.id == nil || agentID != h.id.AgentID {
		return nil, false, nil
	}
	sig, err := record.SignBytes(h.id.AgentKey, msg)
	return sig, err == nil, err
}

func signed(t testing.TB, id *trust.Identity, skill, capability string) *record.SignedAgent {
	t.Helper()
	sa, err := id.Sign(&record.Agent{
		AgentID: id.AgentID, Capabilities: map[string]string{}, Transport: record.Transport{Type: "libp2p"},
		Skills: []record.Skill{{SkillID: skill, Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: capability}}}},
		Seq: 1, IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func newMember(t *testing.T, mn mocknet.Mocknet, id *trust.Identity, i int) *member {
	t.Helper()
	h, err := mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip4/10.1.0.%d/tcp/4777", i)))
	if err != nil {
		t.Fatal(err)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	v, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := &hosted{id: id}
	d, err := dht.New(h, dht.Config{RetryInterval: 100 * time.Millisecond}, v, hs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return &member{id: id, h: h, d: d, hst: hs}
}

func mustID(t testing.TB) *trust.Identity {
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRestartNeedsNoBootstrapNode: a node learns DHT peers through a
// bootstrap node, restarts after the bootstrap node is gone, and rejoins
// from its address book alone.
func TestRestartNeedsNoBootstrapNode(t *testing.T) {
	mn := mocknet.New()
	defer func() { _ = mn.Close() }()
	bootID, provID, rID := mustID(t), mustID(t), mustID(t)

	bootHost, err := mn.AddPeer(bootID.PeerKey, ma.StringCast("/ip4/10.1.0.1/tcp/4777"))
	if err != nil {
		t.Fatal(err)
	}
	_ = mn.LinkAll()
	boot, err := StartNode(ctxT(t), bootHost, NodeConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bootInfo, err := peer.AddrInfoFromP2pAddr(boot.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}

	prov := newMember(t, mn, provID, 2)
	defer func() { _ = prov.d.Close() }()
	if err := Join(ctxT(t), prov.d, []peer.AddrInfo{*bootInfo}, nil); err != nil {
		t.Fatal(err)
	}
	sa := signed(t, provID, "skill-book", "cap-book")
	prov.hst.mu.Lock()
	prov.hst.sa = sa
	prov.hst.mu.Unlock()
	prov.d.SetProvided([]*record.SignedAgent{sa})

	// First life of R: bootstrap node given, the address book records
	// every DHT server R is connected to.
	book := newMemPeers()
	r := newMember(t, mn, rID, 3)
	b, err := NewBook(r.h, book, BookConfig{FlushInterval: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := Join(ctxT(t), r.d, []peer.AddrInfo{*bootInfo}, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "provider and bootstrap node in the address book", func() bool {
		return book.has(prov.h.ID()) && book.has(bootHost.ID())
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	_ = r.d.Close()
	_ = r.h.Close()

	// The bootstrap node goes away for good.
	if err := boot.Close(); err != nil {
		t.Fatal(err)
	}
	_ = bootHost.Close()

	// Second life: same key, no bootstrap node configured.
	r2 := newMember(t, mn, rID, 4)
	defer func() { _ = r2.d.Close() }()
	b2, err := NewBook(r2.h, book, BookConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon retries Join with backoff (node.joinLoop); so does the test,
	// because under a loaded -race run identify and the routing table's
	// lookup check have been seen to miss Join's 10 s wait once.
	var joinErr error
	for attempt := range 3 {
		if joinErr = Join(ctxT(t), r2.d, nil, b2); joinErr == nil {
			break
		}
		t.Logf("rejoin attempt %d: %v", attempt+1, joinErr)
	}
	if joinErr != nil {
		t.Fatalf("rejoin from the address book: %v", joinErr)
	}
	eventually(t, 20*time.Second, "R finds the provider after the restart", func() bool {
		fs, err := r2.d.Find(ctxT(t), "skill-book", "cap-book", 1)
		return err == nil && len(fs) == 1 && fs[0].Provider == prov.h.ID()
	})
	if err := b2.Close(); err != nil { // never started: a no-op
		t.Fatal(err)
	}
	// With neither configured peers nor an address book there is nothing
	// to join, and the error says so.
	if err := Join(ctxT(t), r2.d, nil, nil); !errors.Is(err, dht.ErrNoBootstrapPeers) {
		t.Fatalf("Join(nothing) = %v", err)
	}
}

func TestBookIgnoresNonDHTPeersAndSelf(t *testing.T) {
	mn := mocknet.New()
	defer func() { _ = mn.Close() }()
	a, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := mn.GenPeer() // no DHT
	if err != nil {
		t.Fatal(err)
	}
	_ = mn.LinkAll()
	ps := newMemPeers()
	b, err := NewBook(a, ps, BookConfig{FlushInterval: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if err := b.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	if _, err := mn.ConnectPeers(a.ID(), plain.ID()); err != nil {
		t.Fatal(err)
	}
	// A peer that speaks the DHT protocol is recorded; the plain one not.
	dhtID := mustID(t)
	m := newMember(t, mn, dhtID, 9)
	defer func() { _ = m.d.Close() }()
	if _, err := mn.ConnectPeers(a.ID(), m.h.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "DHT peer recorded", func() bool { return ps.has(m.h.ID()) })
	if ps.has(plain.ID()) {
		t.Fatal("a peer without the DHT protocol was recorded")
	}
	// Peers never returns self nor entries without addresses.
	_ = ps.PutPeer(context.Background(), store.PeerRecord{ID: a.ID(), Addrs: a.Addrs(), LastSeen: time.Now()})
	_ = ps.PutPeer(context.Background(), store.PeerRecord{ID: plain.ID(), LastSeen: time.Now()})
	got, err := b.Peers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != m.h.ID() {
		t.Fatalf("Peers = %v", got)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "peer_key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || !k1.Equals(k2) {
		t.Fatalf("reload gave another key: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Fatal("a world-readable key was accepted")
	}
}
