// Package peerlimit rate-limits what each remote peer may ask of a node:
// a token bucket per peer, in a table of bounded size. The stream
// protocols that serve other nodes (gossip's sync and heartbeat pull,
// liveness's probes and peer_down claims) each keep one.
package peerlimit

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Table is a token bucket per peer, at most max of them. When the table is
// full, the peers whose bucket has refilled (idle: forgetting them loses
// nothing) are forgotten; if none is idle, a new peer is refused until one
// is — minting peer ids does not buy fresh bursts.
type Table struct {
	mu    sync.Mutex
	limit rate.Limit
	burst int
	max   int
	m     map[peer.ID]*rate.Limiter
}

// New returns a table allowing each peer burst requests at once and limit
// per second after, for at most max peers.
func New(limit rate.Limit, burst, max int) *Table {
	return &Table{limit: limit, burst: burst, max: max, m: map[peer.ID]*rate.Limiter{}}
}

// Allow takes a token of p's bucket; false when it is empty or p cannot
// be given one.
func (t *Table) Allow(p peer.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.m[p]
	if !ok {
		if len(t.m) >= t.max {
			for q, ql := range t.m {
				if ql.Tokens() >= float64(t.burst) {
					delete(t.m, q)
				}
			}
			if len(t.m) >= t.max {
				return false
			}
		}
		l = rate.NewLimiter(t.limit, t.burst)
		t.m[p] = l
	}
	return l.Allow()
}

// Len returns how many peers the table holds.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
