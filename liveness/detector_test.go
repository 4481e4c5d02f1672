package liveness

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	wait "github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// member is one host with a detector that holds agents of every peer.
type member struct {
	h    host.Host
	d    *Detector
	m    *metrics.Metrics
	mu   sync.Mutex
	down []peer.ID
	pub  [][]byte
}

func (mb *member) downs() []peer.ID {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return append([]peer.ID(nil), mb.down...)
}

func (mb *member) published() [][]byte {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return append([][]byte(nil), mb.pub...)
}

func newMember(t *testing.T, h host.Host, cfg Config) *member {
	t.Helper()
	mb := &member{h: h, m: metrics.New(false)}
	mb.d = New(h, cfg, Hooks{
		Holds: func(peer.ID) bool { return true },
		Down: func(p peer.ID) {
			mb.mu.Lock()
			mb.down = append(mb.down, p)
			mb.mu.Unlock()
		},
		Publish: func(_ context.Context, data []byte) error {
			mb.mu.Lock()
			mb.pub = append(mb.pub, data)
			mb.mu.Unlock()
			return nil
		},
	}, mb.m, nil)
	mb.d.Start(context.Background())
	t.Cleanup(func() { _ = mb.d.Close() })
	return mb
}

// meshOf builds n fully linked and connected mocknet hosts, each with a
// detector.
func meshOf(t *testing.T, n int) (mocknet.Mocknet, []*member) {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	var ms []*member
	for range n {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, newMember(t, h, Config{}))
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	// What identify would record, so that the tests do not depend on
	// when it runs: addresses to dial, and (below) the probe protocol.
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), peerstore.PermanentAddrTTL)
			}
		}
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	// Every pair connected, and every member known as a probe speaker
	// (helpers are picked among those).
	waitFor(t, "a full mesh", func() bool {
		for _, a := range ms {
			for _, b := range ms {
				if a == b {
					continue
				}
				if a.h.Network().Connectedness(b.h.ID()) != network.Connected {
					// A connection that closed while the mesh formed was
					// pinged and hung up by a detector: connect again.
					_, _ = mn.ConnectPeers(a.h.ID(), b.h.ID())
					return false
				}
				if ps, _ := a.h.Peerstore().SupportsProtocols(b.h.ID(), ProbeProtocol); len(ps) == 0 {
					// Identify has not run yet (or ran on a connection
					// that closed meanwhile).
					if err := a.h.Peerstore().AddProtocols(b.h.ID(), ProbeProtocol); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		return true
	})
	return mn, ms
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Eventually(t, 20*time.Second, what, cond)
}

// idle reports whether no suspicion is queued or under investigation.
func (d *Detector) idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queued) == 0
}

func count(m *metrics.Metrics, outcome string) float64 {
	return testutil.ToFloat64(m.Suspicions.WithLabelValues(outcome))
}

func claims(m *metrics.Metrics, outcome string) float64 {
	return testutil.ToFloat64(m.DownClaims.WithLabelValues(outcome))
}

// crash makes p unreachable as a killed process is: it answers nothing
// from the first instant (mocknet closes a host's connections one by one,
// and a helper could otherwise still ping it through one not yet
// closed), no link, and its host gone.
func crash(t *testing.T, mn mocknet.Mocknet, p *member) {
	t.Helper()
	p.h.SetStreamHandler(ProbeProtocol, func(s network.Stream) { _ = s.Reset() })
	for _, q := range mn.Peers() {
		if q != p.h.ID() {
			_ = mn.UnlinkPeers(p.h.ID(), q)
		}
	}
	_ = p.h.Close()
}

func TestCrashIsConfirmedThroughHelpers(t *testing.T) {
	mn, ms := meshOf(t, 4)
	victim := ms[3]
	crash(t, mn, victim)
	for _, mb := range ms[:3] {
		waitFor(t, "confirmation", func() bool {
			return len(mb.downs()) == 1
		})
		if got := mb.downs()[0]; got != victim.h.ID() {
			t.Errorf("down %s, want %s", got, victim.h.ID())
		}
		if count(mb.m, "confirmed") != 1 {
			t.Errorf("suspicions: confirmed %v", count(mb.m, "confirmed"))
		}
		if !mb.d.Down(victim.h.ID()) {
			t.Error("Down() is false after a confirmation")
		}
		// Published after the claim jitter (nobody else's claim reaches a
		// member here: Publish only records).
		waitFor(t, "the claim published", func() bool { return len(mb.published()) > 0 })
		pub := mb.published()
		if len(pub) != 1 {
			t.Fatalf("%d claims published", len(pub))
		}
		c, err := DecodeClaim(pub[0])
		if err != nil || c.Peer != victim.h.ID() {
			t.Errorf("published claim %s: %+v, %v", pub[0], c, err)
		}
	}
}

// A node cut off from one peer that others still reach does not evict it:
// the helpers refute the suspicion.
func TestPartitionedPeerIsNotEvicted(t *testing.T) {
	mn, ms := meshOf(t, 4)
	a, p := ms[0], ms[3]
	if err := mn.UnlinkPeers(a.h.ID(), p.h.ID()); err != nil {
		t.Fatal(err)
	}
	if err := mn.DisconnectPeers(a.h.ID(), p.h.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refutation", func() bool { return count(a.m, "refuted") == 1 })
	if d := a.downs(); len(d) != 0 {
		t.Errorf("evicted %v", d)
	}
	// Within the cooldown the peer is not suspected again.
	if a.d.Suspect(p.h.ID()) {
		t.Error("suspected again within the cooldown")
	}
	waitFor(t, "a's detector idle", a.d.idle)
	if n := count(a.m, "refuted") + count(a.m, "confirmed"); n != 1 {
		t.Errorf("suspected again within the cooldown: %v investigations", n)
	}
}

// A connection closed by a connection manager (here: by this side) is
// followed by a ping that reaches the peer; the connection the ping opened
// is closed again, so the detector does not undo the trim, and the close
// it causes is not suspected again (the peer was just found alive).
func TestTrimmedConnectionIsAlive(t *testing.T) {
	mn, ms := meshOf(t, 2)
	a, p := ms[0], ms[1]
	if err := mn.DisconnectPeers(a.h.ID(), p.h.ID()); err != nil {
		t.Fatal(err)
	}
	// Both sides suspect each other; either ping settles it.
	waitFor(t, "ping", func() bool {
		return count(a.m, "alive")+count(p.m, "alive") >= 1 && a.h.Network().Connectedness(p.h.ID()) != network.Connected
	})
	// The hang-up closes the connection again: each side finds the other
	// marked alive and does not investigate it once more.
	waitFor(t, "both detectors idle", func() bool { return a.d.idle() && p.d.idle() })
	if a.d.Suspect(p.h.ID()) || p.d.Suspect(a.h.ID()) {
		t.Error("a peer just found alive was suspected again")
	}
	if n := count(a.m, "alive") + count(p.m, "alive"); n > 2 {
		t.Errorf("%v pings: the hang-up was suspected again", n)
	}
	for _, mb := range ms {
		if n := count(mb.m, "unconfirmed") + count(mb.m, "confirmed") + count(mb.m, "refuted"); n != 0 {
			t.Errorf("%v suspicions of a live peer were not settled by the ping", n)
		}
		if d := mb.downs(); len(d) != 0 {
			t.Errorf("evicted %v", d)
		}
	}
}

// With nobody to ask, silence proves nothing: the seed's timeout decides.
func TestLoneSilenceIsUnconfirmed(t *testing.T) {
	mn, ms := meshOf(t, 2)
	crash(t, mn, ms[1])
	waitFor(t, "verdict", func() bool { return count(ms[0].m, "unconfirmed") == 1 })
	if d := ms[0].downs(); len(d) != 0 {
		t.Errorf("evicted %v", d)
	}
}

// Two daemons on one machine: the killed one's TCP port refuses a
// connect, which is proof enough without helpers. The hosts are agentd's
// own (TCP and QUIC on loopback): the swarm's dial waits on QUIC until the
// timeout and reports only the deadline, so the refusal must be seen by
// a TCP connect of its own.
func TestLoneRefusedIsConfirmed(t *testing.T) {
	newHost := func() host.Host {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p2p.New(p2p.Config{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ha, hp := newHost(), newHost()
	defer func() { _ = ha.Close() }()
	a := newMember(t, ha, Config{})
	if err := ha.Connect(context.Background(), peer.AddrInfo{ID: hp.ID(), Addrs: hp.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if err := hp.Close(); err != nil {
		t.Fatal(err)
	}
	if !wait.Within(20*time.Second, func() bool { return len(a.downs()) == 1 }) {
		// "unconfirmed": the refusal was not seen (tcpRefused).
		t.Fatalf("no confirmation within 20 s; suspicions: confirmed %v, unconfirmed %v, alive %v, refuted %v",
			count(a.m, "confirmed"), count(a.m, "unconfirmed"), count(a.m, "alive"), count(a.m, "refuted"))
	}
	if count(a.m, "confirmed") != 1 {
		t.Errorf("confirmed %v", count(a.m, "confirmed"))
	}
}

func claimFrom(t *testing.T, p peer.ID, at time.Time) []byte {
	t.Helper()
	b, err := EncodeClaim(p, at)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClaims(t *testing.T) {
	mn, ms := meshOf(t, 4)
	a, liar, other, p := ms[0], ms[1], ms[2], ms[3]
	ctx := context.Background()
	now := time.Now()

	// A lie about a live peer costs one ping and goes no further.
	if r := a.d.ValidateClaim(ctx, liar.h.ID(), claimFrom(t, p.h.ID(), now)); r != pubsub.ValidationIgnore {
		t.Errorf("lie: %v, want ignore", r)
	}
	if len(a.downs()) != 0 || claims(a.m, "refuted") != 1 {
		t.Errorf("lie: downs %v, refuted %v", a.downs(), claims(a.m, "refuted"))
	}
	// Malformed, self-accusing, about this node, stale, from the future.
	for name, tc := range map[string]struct {
		data []byte
		want pubsub.ValidationResult
	}{
		"malformed":   {[]byte(`{"protocol_version":"v1.0","type":"peer_down","peer_id":"nope","at":"2026-01-01T00:00:00Z"}`), pubsub.ValidationReject},
		"case":        {[]byte(`{"protocol_version":"v1.0","type":"peer_down","Peer_ID":"x","peer_id":"` + p.h.ID().String() + `","at":"` + now.UTC().Format(time.RFC3339) + `"}`), pubsub.ValidationReject},
		"about self":  {claimFrom(t, a.h.ID(), now), pubsub.ValidationIgnore},
		"own author":  {claimFrom(t, other.h.ID(), now), pubsub.ValidationReject},
		"stale":       {claimFrom(t, p.h.ID(), now.Add(-2*time.Minute)), pubsub.ValidationIgnore},
		"future":      {claimFrom(t, p.h.ID(), now.Add(time.Minute)), pubsub.ValidationIgnore},
		"new version": {[]byte(`{"protocol_version":"v1.9","type":"peer_up","peer_id":"x","at":"x"}`), pubsub.ValidationIgnore},
		"old major":   {[]byte(`{"protocol_version":"v2.0","type":"peer_down"}`), pubsub.ValidationIgnore},
	} {
		if r := a.d.ValidateClaim(ctx, other.h.ID(), tc.data); r != tc.want {
			t.Errorf("%s: %v, want %v", name, r, tc.want)
		}
	}
	if len(a.downs()) != 0 {
		t.Fatalf("evicted %v", a.downs())
	}

	// A true claim is confirmed by a ping of our own and forwarded once.
	crash(t, mn, p)
	// a's own suspicion may confirm first; either way exactly one claim
	// about p is forwarded.
	r1 := a.d.ValidateClaim(ctx, other.h.ID(), claimFrom(t, p.h.ID(), time.Now()))
	r2 := a.d.ValidateClaim(ctx, liar.h.ID(), claimFrom(t, p.h.ID(), time.Now()))
	accepted := 0
	for _, r := range []pubsub.ValidationResult{r1, r2} {
		if r == pubsub.ValidationAccept {
			accepted++
		}
	}
	ownConfirmed := count(a.m, "confirmed") == 1
	if ownConfirmed && accepted != 0 || !ownConfirmed && accepted != 1 {
		t.Errorf("claims accepted %d (own confirmation %v): %v %v", accepted, ownConfirmed, r1, r2)
	}
	if d := a.downs(); len(d) != 1 || d[0] != p.h.ID() {
		t.Errorf("downs %v", d)
	}
}

func TestClaimRateLimit(t *testing.T) {
	_, ms := meshOf(t, 3)
	a, liar, p := ms[0], ms[1], ms[2]
	ctx := context.Background()
	for range 15 {
		if a.d.ValidateClaim(ctx, liar.h.ID(), claimFrom(t, p.h.ID(), time.Now())) != pubsub.ValidationIgnore {
			t.Fatal("a lie was not ignored")
		}
	}
	limited := int(claims(a.m, "rate_limited"))
	if limited < 4 {
		t.Errorf("15 claims at once: %d rate limited, want ≥ 4 (burst 10)", limited)
	}
}

// askRaw sends one raw request frame and returns the answer frame.
func askRaw(t *testing.T, from host.Host, to peer.ID, req []byte) probeAnswer {
	t.Helper()
	s, err := from.NewStream(context.Background(), to, ProbeProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if err := writeFrame(s, req); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	b, err := readFrame(bufio.NewReader(s), MaxProbeFrame)
	if err != nil {
		t.Fatal(err)
	}
	var a probeAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestProbeServer(t *testing.T) {
	mn, ms := meshOf(t, 3)
	a, b, c := ms[0], ms[1], ms[2]
	req := func(p peer.ID) []byte {
		return []byte(`{"protocol_version":"v1.0","peer_id":"` + p.String() + `"}`)
	}
	// ask sends a request from a to b, again while b's rate limit refuses
	// it: the other detectors' own probes of b draw on a's budget too.
	ask := func(body []byte) probeAnswer {
		t.Helper()
		var ans probeAnswer
		waitFor(t, "an answer within the rate limit", func() bool {
			ans = askRaw(t, a.h, b.h.ID(), body)
			return ans.Error == nil || ans.Error.Code != record.CodeRateLimited
		})
		return ans
	}
	if ans := ask(req(b.h.ID())); !ans.Reachable || ans.Error != nil {
		t.Errorf("ping: %+v", ans)
	}
	if ans := ask(req(c.h.ID())); !ans.Reachable {
		t.Errorf("probe of a live peer: %+v", ans)
	}
	_ = mn.UnlinkPeers(b.h.ID(), c.h.ID())
	_ = mn.DisconnectPeers(b.h.ID(), c.h.ID())
	b.d.srv.mu.Lock()
	clear(b.d.srv.cache) // as once cacheFor has passed
	b.d.srv.mu.Unlock()
	if ans := ask(req(c.h.ID())); ans.Reachable || ans.Error != nil {
		t.Errorf("probe of an unreachable peer: %+v", ans)
	}
	// A peer the helper never heard of is not reported unreachable.
	stranger, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	if ans := ask(req(stranger.ID())); ans.Error == nil || ans.Error.Code != record.CodeNotFound {
		t.Errorf("probe of an unknown peer: %+v, want %s", ans, record.CodeNotFound)
	}
	for name, body := range map[string][]byte{
		"not json":     []byte("nope"),
		"bad peer":     []byte(`{"protocol_version":"v1.0","peer_id":"x"}`),
		"old major":    []byte(`{"protocol_version":"v0.1","peer_id":"x"}`),
		"too large":    []byte(`{"protocol_version":"v1.0","peer_id":"` + strings.Repeat("x", MaxProbeFrame) + `"}`),
		"names asker":  req(a.h.ID()),
		"dup member":   []byte(`{"protocol_version":"v1.0","peer_id":"x","peer_id":"y"}`),
		"case variant": []byte(`{"protocol_version":"v1.0","PEER_ID":"x"}`),
	} {
		if name == "too large" {
			// The frame length alone is refused; the stream is reset.
			continue
		}
		ans := ask(body)
		if ans.Error == nil || ans.Error.Code != record.CodeMalformedPayload {
			t.Errorf("%s: %+v, want %s", name, ans, record.CodeMalformedPayload)
		}
	}
	// Rate limit: bursts of 10 per asker.
	limited := 0
	for range 20 {
		if ans := askRaw(t, a.h, b.h.ID(), req(b.h.ID())); ans.Error != nil && ans.Error.Code == record.CodeRateLimited {
			limited++
		}
	}
	if limited == 0 {
		t.Error("20 requests at once were not rate limited")
	}
}

// TestOwnClaimSuppressed: a node that confirmed a crash itself waits
// before publishing its claim; another node's claim arriving meanwhile is
// forwarded in its place, and its own is not published.
func TestOwnClaimSuppressed(t *testing.T) {
	mn, ms := meshOf(t, 3)
	a, b, victim := ms[0], ms[1], ms[2]
	release := make(chan struct{})
	a.d.mu.Lock()
	a.d.claimWait = func(ctx context.Context) bool {
		select {
		case <-release:
			return true
		case <-ctx.Done():
			return false
		}
	}
	a.d.mu.Unlock()
	crash(t, mn, victim)
	waitFor(t, "a's confirmation", func() bool { return len(a.downs()) == 1 })
	claim, err := EncodeClaim(victim.h.ID(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res := a.d.ValidateClaim(context.Background(), b.h.ID(), claim); res != pubsub.ValidationAccept {
		t.Fatalf("b's claim while a's waits: %v, want accept (forwarded)", res)
	}
	if res := a.d.ValidateClaim(context.Background(), b.h.ID(), claim); res != pubsub.ValidationIgnore {
		t.Fatalf("the same claim again: %v, want ignore", res)
	}
	close(release)
	waitFor(t, "a's own claim suppressed", func() bool { return claims(a.m, "suppressed") == 1 })
	if pub := a.published(); len(pub) != 0 {
		t.Fatalf("a published %d claims after forwarding b's", len(pub))
	}
}
