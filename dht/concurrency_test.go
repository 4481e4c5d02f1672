package dht

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A lookup queries LookupConcurrency peers at a time, not kad-dht's 10.
// Every peer asked holds its answer until the lookup gives up, so the
// lookup never gets past its first round: the peers asked are the round.
func TestLookupConcurrency(t *testing.T) {
	var (
		mu    sync.Mutex
		from  peer.ID
		key   []byte
		asked = map[int]bool{} // the nodes that received the lookup's request
	)
	release := make(chan struct{})
	// kad-dht's message sender sends a request again, once, when reading
	// the answer fails with anything but context.Canceled — the lookup's
	// deadline too — so a peer of the first round may receive it twice.
	// The round is the peers asked, not the requests.
	hookOf := func(i int) func(context.Context, network.Stream, *pb.Message) {
		return func(_ context.Context, s network.Stream, req *pb.Message) {
			mu.Lock()
			match := req.GetType() == pb.Message_GET_PROVIDERS && s.Conn().RemotePeer() == from && bytes.Equal(req.GetKey(), key)
			if match {
				asked[i] = true
			}
			mu.Unlock()
			if match {
				<-release
			}
		}
	}
	nAsked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(asked)
	}
	c := newCluster(t, 30, 0, func(i int, cfg *Config) {
		cfg.kadExtra = []kaddht.Option{kaddht.OnRequestHook(hookOf(i))}
	})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the cluster's teardown
	k := record.SkillKey(record.Wildcard, "nobody.offers.this")
	mu.Lock()
	from, key = c.nodes[0].h.ID(), k.CID().Hash()
	mu.Unlock()
	kad, _, err := c.nodes[0].d.running()
	if err != nil {
		t.Fatal(err)
	}
	if n := kad.RoutingTable().Size(); n <= 10 {
		t.Fatalf("node 0 knows %d peers; the test needs more than kad-dht's round of 10", n)
	}
	// The deadline only ends the lookup; nothing is timed.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	found, err := c.nodes[0].d.FindPeers(ctx, k, 5)
	if err != nil || len(found) != 0 {
		t.Fatalf("FindPeers = %v, %v; want no provider", found, err)
	}
	// On a loaded machine a request may still be on its way.
	eventually(t, 10*time.Second, "the first round's requests arrive", func() bool { return nAsked() >= LookupConcurrency })
	open()
	if got := nAsked(); got != LookupConcurrency {
		t.Fatalf("the lookup's first round asked %d peers; want LookupConcurrency = %d", got, LookupConcurrency)
	}
}
