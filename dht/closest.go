package dht

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// kadBucketSize is kad-dht's k (amino.DefaultBucketSize, which agentd does
// not change): a lookup returns the k closest peers it found.
const kadBucketSize = 20

// smallNetTTL is how long the closest peers of a small network stand in
// for another lookup (smallNet).
const smallNetTTL = time.Minute

// smallNet keeps the answer of the last lookup when the network is smaller
// than a lookup's answer can be: the routing table holds fewer than k
// peers and a completed lookup found fewer than k. Such a lookup asked
// every peer it knew, each answered with every peer it knows (fewer than
// k, or the answer would hold k), so it met every server of the network:
// the closest peers of any other key are the same set. A node hosting
// 10 000 agents in a network of a few servers otherwise ran a lookup per
// provided key and per put value — 450–650 lookups every reprovide round and
// 10 000 in each re-signing round, each as costly as the store it
// precedes (docs/performance.md, "Small networks: one walk for every key").
//
// The answer is dropped after smallNetTTL, when the routing table's size
// changes (a server joined or left) and when a store to one of its peers
// fails. A server that joined through another peer is missed for at most
// smallNetTTL, as a lookup's answer is missed by a record stored just
// before that server joined; the next reprovide reaches it.
type smallNet struct {
	mu     sync.Mutex
	peers  []peer.ID
	rtSize int
	until  time.Time

	lookups atomic.Int64 // lookups run
	saved   atomic.Int64 // lookups answered from the kept set
	// count, when set, also counts each in a metric ("run", "saved").
	count func(outcome string)
}

// closest returns the closest peers to key: the kept set of a small
// network when it still stands, else lookup's answer (kept when it shows
// the network is small). rtSize is the routing table's size now.
func (s *smallNet) closest(ctx context.Context, rtSize int, key string, lookup func(context.Context, string) ([]peer.ID, error)) ([]peer.ID, error) {
	now := time.Now()
	s.mu.Lock()
	if s.peers != nil && s.rtSize == rtSize && now.Before(s.until) {
		peers := slices.Clone(s.peers)
		s.mu.Unlock()
		s.saved.Add(1)
		s.counted("saved")
		return peers, nil
	}
	s.mu.Unlock()
	s.lookups.Add(1)
	s.counted("run")
	peers, err := lookup(ctx, key)
	if err == nil && len(peers) > 0 && len(peers) < kadBucketSize && rtSize < kadBucketSize {
		s.mu.Lock()
		s.peers, s.rtSize, s.until = slices.Clone(peers), rtSize, now.Add(smallNetTTL)
		s.mu.Unlock()
	}
	return peers, err
}

// forget drops the kept set: a store to one of its peers failed, so the
// network is not what it was.
func (s *smallNet) forget() {
	s.mu.Lock()
	s.peers = nil
	s.mu.Unlock()
}

func (s *smallNet) counted(outcome string) {
	if s.count != nil {
		s.count(outcome)
	}
}
