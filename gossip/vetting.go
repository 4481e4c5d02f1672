package gossip

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// AuthorVetter is implemented by a Sink that admits records only from
// peers it has reached over a connection of their own (the node does:
// docs/protocol.md, "Admission on an open network"). When the sink
// implements it, an announcement is forwarded only once its author is
// vetted: VetAuthor may block (the node dials the author) until ctx ends,
// and reports whether the author was reached. issued is when the record
// being admitted was signed: an author whose last attempt failed before
// then has shown life since (a node that restarted), and is tried again
// at once rather than after the retry interval. An announcement whose author
// cannot be reached is ignored — not delivered, not forwarded — and the
// peer that delivered it is charged in the application-specific score
// (P5): honest nodes never forward such messages, so only the peer that
// injects them pays.
type AuthorVetter interface {
	VetAuthor(ctx context.Context, author peer.ID, issued time.Time) bool
}

// ReasonUnvettedAuthor is the rejects reason of an announcement whose
// author could not be reached.
const ReasonUnvettedAuthor = "unvetted_author"

// Penalty of P5 for delivering announcements of unreachable authors: each
// costs unvettedPenalty, decaying with time constant unvettedDecay. One
// such delivery is -10; a hundred within minutes pass the publish
// threshold (-1000); a flood of thousands is graylisted. An honest relay
// that reached an author this node cannot (an asymmetric NAT) pays a few
// points now and then.
const (
	unvettedPenalty  = 10
	unvettedDecay    = 5 * time.Minute
	vetWaitDefault   = 3 * time.Second
	maxPenaltyTracks = 4096
)

// penalties is the decaying count of unvetted deliveries per peer.
type penalties struct {
	mu sync.Mutex
	m  map[peer.ID]*penalty
}

type penalty struct {
	v  float64
	at time.Time
}

func newPenalties() *penalties { return &penalties{m: map[peer.ID]*penalty{}} }

func decayed(p *penalty, now time.Time) float64 {
	return p.v * math.Exp(-float64(now.Sub(p.at))/float64(unvettedDecay))
}

// add charges p for one delivery.
func (ps *penalties) add(p peer.ID) {
	now := time.Now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e := ps.m[p]
	if e == nil {
		if len(ps.m) >= maxPenaltyTracks {
			for k, x := range ps.m {
				if decayed(x, now) < 1 {
					delete(ps.m, k)
				}
			}
		}
		e = &penalty{at: now}
		ps.m[p] = e
	}
	e.v, e.at = decayed(e, now)+1, now
}

// score is p's application-specific score (P5, weight 1).
func (ps *penalties) score(p peer.ID) float64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e := ps.m[p]
	if e == nil {
		return 0
	}
	return -unvettedPenalty * decayed(e, time.Now())
}
