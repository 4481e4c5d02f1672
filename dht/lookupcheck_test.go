package dht

import (
	"testing"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
)

// kad-dht admits a connected peer to its routing table only after one
// FIND_NODE to it succeeds (its lookup check), and does not try again for
// two minutes when that fails. Bootstrap adds its reached DHT servers
// itself when none joined after half its wait: here every lookup check of
// the joining nodes times out at once, and they still bootstrap.
func TestBootstrapWhenTheLookupCheckFails(t *testing.T) {
	c := newCluster(t, 3, 0, func(i int, cfg *Config) {
		cfg.QueryTimeout = 2 * time.Second
		if i > 0 {
			cfg.kadExtra = []kaddht.Option{kaddht.RoutingTableRefreshQueryTimeout(time.Nanosecond)}
		}
	})
	for _, nd := range c.nodes[1:] {
		kad, _, err := nd.d.running()
		if err != nil {
			t.Fatal(err)
		}
		if kad.RoutingTable().Find(c.nodes[0].h.ID()) == "" {
			t.Fatalf("the bootstrap peer is not in node %s's routing table", nd.h.ID())
		}
	}
}
