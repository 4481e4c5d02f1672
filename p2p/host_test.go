package p2p

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func key(t *testing.T) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// --announce replaces the advertised addresses; the listen addresses stay
// what the host binds.
func TestAnnounce(t *testing.T) {
	pub := ma.StringCast("/ip4/198.51.100.7/tcp/4777")
	h, err := New(Config{Key: key(t), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true,
		NAT: NAT{Reachability: ReachabilityPublic, Announce: []ma.Multiaddr{pub}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if got := h.Addrs(); len(got) != 1 || !got[0].Equal(pub) {
		t.Fatalf("advertised %v, want only %s", got, pub)
	}
	// (plus /p2p-circuit: the relay transport, on by default, listens too)
	l := slices.DeleteFunc(h.Network().ListenAddresses(), func(a ma.Multiaddr) bool { return a.String() == "/p2p-circuit" })
	if len(l) != 1 || !strings.HasPrefix(l[0].String(), "/ip4/127.0.0.1/tcp/") {
		t.Fatalf("listening on %v", l)
	}
}

func TestNATOptionsRefuseUnknownReachability(t *testing.T) {
	_, err := New(Config{Key: key(t), Listen: []string{}, DisableMetrics: true, NAT: NAT{Reachability: "sometimes"}})
	if err == nil || !strings.Contains(err.Error(), `reachability "sometimes"`) {
		t.Fatalf("err = %v", err)
	}
}

// AutoRelay's candidates: the configured relays first, then connected
// peers that identify says speak the hop protocol, at most num.
func TestRelaySource(t *testing.T) {
	relay, err := New(Config{Key: key(t), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true,
		NAT: NAT{Reachability: ReachabilityPublic, RelayService: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Close() }()
	plain, err := New(Config{Key: key(t), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Close() }()
	self, err := New(Config{Key: key(t), Listen: []string{}, DisableMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = self.Close() }()
	ctx := context.Background()
	for _, h := range []host.Host{relay, plain} {
		if err := self.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	// Identify has run once Connect returns (basichost waits for it).
	static := peer.AddrInfo{ID: plain.ID()} // a configured relay comes first even if it is not one
	src := relaySource(func() []peer.AddrInfo { return []peer.AddrInfo{static} }, func() host.Host { return self })
	var got []peer.ID
	for ai := range src(ctx, 10) {
		got = append(got, ai.ID)
	}
	if !slices.Equal(got, []peer.ID{plain.ID(), relay.ID()}) {
		t.Fatalf("candidates = %v, want [%s %s]", got, plain.ID(), relay.ID())
	}
	got = nil
	for ai := range src(ctx, 1) {
		got = append(got, ai.ID)
	}
	if len(got) != 1 {
		t.Fatalf("num=1 gave %v", got)
	}
}

// WatchReachability follows AutoNAT's verdict: a host forced public says
// so (the stateful event reaches a watcher started afterwards too).
func TestWatchReachability(t *testing.T) {
	h, err := New(Config{Key: key(t), Listen: []string{}, DisableMetrics: true, NAT: NAT{Reachability: ReachabilityPublic}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	seen := make(chan string, 4)
	r, err := WatchReachability(h, "test", func(v network.Reachability) { seen <- v.String() })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-seen:
		if v != "Public" || r.String() != "public" {
			t.Fatalf("verdict %q, String %q", v, r.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reachability event")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConnDefaultsMatchConfig: the config's defaults (what `agentd config
// print` shows) are the connection manager's own.
func TestConnDefaultsMatchConfig(t *testing.T) {
	c := config.Default().Connections
	if c.LowWater != DefaultLowWater || c.HighWater != DefaultHighWater || c.GracePeriod.D() != DefaultConnGrace {
		t.Fatalf("config defaults %d/%d/%s, p2p's %d/%d/%s", c.LowWater, c.HighWater, c.GracePeriod.D(), DefaultLowWater, DefaultHighWater, DefaultConnGrace)
	}
}
