package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
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

// gatedHost refuses to connect to one peer until open is set, and counts
// the attempts: a peer that cannot be reached yet.
type gatedHost struct {
	host.Host
	target peer.ID
	open   *atomic.Bool
	tries  *atomic.Int32
}

func (h gatedHost) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if ai.ID == h.target {
		h.tries.Add(1)
		if !h.open.Load() {
			return errors.New("not reachable yet")
		}
	}
	return h.Host.Connect(ctx, ai)
}

// TestVetRetriesAPeerNotFoundYet: an author this node cannot reach at
// first (a node that joined a moment ago, in no routing table yet) and can
// reach once that attempt failed is vetted within the validator's wait,
// not refused until its next announcement.
func TestVetRetriesAPeerNotFoundYet(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 0, Config{})
		x, err := tn.mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = x.Close() })
		var open atomic.Bool
		var tries atomic.Int32
		tn.wrap = func(h host.Host) host.Host { return gatedHost{Host: h, target: x.ID(), open: &open, tries: &tries} }
		n := tn.add(nil, nil)
		tn.wrap = nil
		n.host.Peerstore().AddAddrs(x.ID(), x.Addrs(), peerstore.TempAddrTTL)

		vetted := make(chan bool, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			vetted <- n.vet.wait(ctx, x.ID())
		}()
		waitFor(t, 3*time.Second, "a first attempt on the peer", func() bool { return tries.Load() >= 1 })
		open.Store(true)
		if !<-vetted {
			t.Fatalf("the peer was not vetted after %d attempts; it was reachable from the second", tries.Load())
		}
		if n := tries.Load(); n < 2 {
			t.Fatalf("%d attempts; the first failed, so the vetter must have tried again", n)
		}
	})
}
