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

// gatedNode starts a node whose host cannot reach the peer x until open
// is set, and counts its attempts on x; x's addresses are in its
// peerstore.
func gatedNode(t *testing.T) (n *tnode, x host.Host, open *atomic.Bool, tries *atomic.Int32) {
	t.Helper()
	tn := newNet(t, 0, Config{})
	x, err := tn.mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	open, tries = new(atomic.Bool), new(atomic.Int32)
	tn.wrap = func(h host.Host) host.Host { return gatedHost{Host: h, target: x.ID(), open: open, tries: tries} }
	n = tn.add(nil, nil)
	tn.wrap = nil
	n.host.Peerstore().AddAddrs(x.ID(), x.Addrs(), peerstore.TempAddrTTL)
	return n, x, open, tries
}

// TestVetRetriesAPeerNotFoundYet: an author this node cannot reach at
// first (a node that joined a moment ago, in no routing table yet) and can
// reach once that attempt failed is vetted within the validator's wait,
// not refused until its next announcement.
func TestVetRetriesAPeerNotFoundYet(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n, x, open, tries := gatedNode(t)

		vetted := make(chan bool, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			vetted <- n.vet.wait(ctx, x.ID(), time.Time{})
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

// TestVetRetriesARestartedPeer: a peer whose attempt failed (it was down)
// is not tried again within vetRetryAfter for a record signed before that
// attempt — its old records, forwarded while it was down — but is at once
// for a record it signed since (it restarted and announces): that
// announcement used to be ignored, and its agent waited for its first
// heartbeat.
func TestVetRetriesARestartedPeer(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n, x, open, tries := gatedNode(t)
		wait := func(issued time.Time) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return n.vet.wait(ctx, x.ID(), issued)
		}
		old := time.Now().Add(-time.Minute)
		if wait(old) {
			t.Fatal("a peer that cannot be reached was vetted")
		}
		failed := tries.Load()
		if failed == 0 {
			t.Fatal("no attempt on the peer")
		}
		open.Store(true) // it restarted
		if wait(old) {
			t.Fatal("tried again for a record signed before the failed attempt")
		}
		if n := tries.Load(); n != failed {
			t.Fatalf("%d attempts after the failed one for an old record, want none", n-failed)
		}
		if !wait(time.Now()) {
			t.Fatal("a record signed after the failed attempt did not bring a new attempt")
		}
		if n := tries.Load(); n != failed+1 {
			t.Fatalf("%d attempts, want %d", n, failed+1)
		}
	})
}

func TestRetryVet(t *testing.T) {
	tried := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		after, issued time.Duration // after tried
		want          bool
	}{
		{after: vetRetryAfter, issued: -time.Hour, want: true},
		{after: vetRetryAfter - time.Millisecond, issued: -time.Hour, want: false},
		{after: vetRetryNews, issued: time.Millisecond, want: true},
		{after: vetRetryNews - time.Millisecond, issued: time.Millisecond, want: false},
		{after: vetRetryNews, issued: 0, want: false}, // signed as the attempt began: no news
	} {
		if got := retryVet(tried.Add(c.after), tried, tried.Add(c.issued)); got != c.want {
			t.Errorf("retryVet(tried+%v, tried, issued tried%+v) = %v, want %v", c.after, c.issued, got, c.want)
		}
	}
}
