package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
)

func TestPublicPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"/ip4/8.8.4.4/tcp/4777":                  "8.8.4.0/24",
		"/ip4/127.0.0.1/tcp/4777":                "",
		"/ip4/192.168.1.20/udp/4777/quic-v1":     "",
		"/ip4/203.0.113.9/tcp/1":                 "", // documentation range
		"/ip6/2a00:1450:4001:81b::200e/tcp/4777": "2a00:1450:4001::/48",
		"/ip6/::1/tcp/4777":                      "",
		"/dns4/example.com/tcp/4777":             "",
	} {
		if got := publicPrefix(ma.StringCast(in)); got != want {
			t.Errorf("publicPrefix(%s) = %q, want %q", in, got, want)
		}
	}
	if publicPrefix(nil) != "" {
		t.Error("nil address has a prefix")
	}
}

// TestVetRetriesAPeerNotFoundYet: an author this node cannot find at
// first (no address known, not in the DHT: a node that joined a moment
// ago) and can reach a few hundred milliseconds later is vetted within the
// validator's wait, not refused until the next announcement.
func TestVetRetriesAPeerNotFoundYet(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 1, Config{})
		n := tn.nodes[0]
		x, err := tn.mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = x.Close() })
		// Not linked yet: no dial reaches it (mocknet dials by link).
		linked := make(chan struct{})
		defer func() { <-linked }()
		go func() {
			defer close(linked)
			time.Sleep(300 * time.Millisecond)
			if _, err := tn.mn.LinkPeers(n.host.ID(), x.ID()); err != nil {
				t.Error(err)
			}
			n.host.Peerstore().AddAddrs(x.ID(), x.Addrs(), peerstore.TempAddrTTL)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if !n.vet.wait(ctx, x.ID()) {
			t.Fatalf("the peer was not vetted (gave up after %v); it became reachable at 300 ms", time.Since(start))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("vetted after %v; it was reachable from 300 ms", took)
		}
	})
}
