package gossip

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// peerLimits rate-limits the requests one stream protocol serves to each
// peer: a token bucket per peer, at most maxLimiters of them. When the
// table is full, the peers whose bucket has refilled (idle) are forgotten;
// if none is, a new peer is refused.
type peerLimits struct {
	mu    sync.Mutex
	every time.Duration
	burst int
	m     map[peer.ID]*rate.Limiter
}

func newPeerLimits(every time.Duration, burst int) *peerLimits {
	return &peerLimits{every: every, burst: burst, m: map[peer.ID]*rate.Limiter{}}
}

// allow takes a token of p's bucket.
func (pl *peerLimits) allow(p peer.ID) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	l, ok := pl.m[p]
	if !ok {
		if len(pl.m) >= maxLimiters {
			for q, ql := range pl.m {
				if ql.Tokens() >= float64(pl.burst) {
					delete(pl.m, q)
				}
			}
			if len(pl.m) >= maxLimiters {
				return false
			}
		}
		l = rate.NewLimiter(rate.Every(pl.every), pl.burst)
		pl.m[p] = l
	}
	return l.Allow()
}
