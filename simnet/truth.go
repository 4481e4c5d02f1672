package simnet

import (
	"slices"
	"sync"
	"time"
)

// truth is the ground truth of a run: every agent that ever registered,
// what it offers, when it was alive, and the partitions of the network. It
// keeps history, so an answer can be scored against the truth at the
// moment its query was issued even when it arrives later.
type truth struct {
	mu         sync.Mutex
	staleAfter time.Duration
	agents     map[string]*agentTruth
	order      []string // registration order, for deterministic iteration
	parts      []*partitionSpan
}

type agentTruth struct {
	node   int
	offers []CatalogSkill
	spans  []span // alive intervals, in order; the last may be open
}

// span is [from, to); a zero to means still open.
type span struct{ from, to time.Time }

type partitionSpan struct {
	from, to time.Time   // to is zero while the partition lasts
	side     map[int]int // node index → side; nodes not listed are on side 0
}

func newTruth(staleAfter time.Duration) *truth {
	return &truth{staleAfter: staleAfter, agents: map[string]*agentTruth{}}
}

// up records that agent id (hosted by node, offering offers) is alive from at.
func (t *truth) up(id string, node int, offers []CatalogSkill, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		a = &agentTruth{node: node}
		t.agents[id] = a
		t.order = append(t.order, id)
	}
	a.node, a.offers = node, offers
	if n := len(a.spans); n > 0 && a.spans[n-1].to.IsZero() {
		return
	}
	a.spans = append(a.spans, span{from: at})
}

// down records that agent id stopped being alive at at.
func (t *truth) down(id string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return
	}
	if n := len(a.spans); n > 0 && a.spans[n-1].to.IsZero() {
		a.spans[n-1].to = at
	}
}

// partition records a partition starting at at with the given sides.
func (t *truth) partition(at time.Time, side map[int]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.parts = append(t.parts, &partitionSpan{from: at, side: side})
}

// heal ends the current partition at at.
func (t *truth) heal(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.parts); n > 0 && t.parts[n-1].to.IsZero() {
		t.parts[n-1].to = at
	}
}

// partitionAtLocked returns the partition in force at at, or nil.
func (t *truth) partitionAtLocked(at time.Time) *partitionSpan {
	for _, p := range t.parts {
		if !at.Before(p.from) && (p.to.IsZero() || at.Before(p.to)) {
			return p
		}
	}
	return nil
}

func (t *truth) reachableLocked(a, b int, at time.Time) bool {
	p := t.partitionAtLocked(at)
	return p == nil || p.side[a] == p.side[b]
}

func (a *agentTruth) liveAt(at time.Time) bool {
	for _, s := range a.spans {
		if !at.Before(s.from) && (s.to.IsZero() || at.Before(s.to)) {
			return true
		}
	}
	return false
}

// deadFor returns how long a has been dead at at (false when alive, or not
// yet registered at at).
func (a *agentTruth) deadFor(at time.Time) (time.Duration, bool) {
	var lastEnd time.Time
	for _, s := range a.spans {
		if at.Before(s.from) {
			break
		}
		if s.to.IsZero() || at.Before(s.to) {
			return 0, false
		}
		lastEnd = s.to
	}
	if lastEnd.IsZero() {
		return 0, false
	}
	return at.Sub(lastEnd), true
}

func (a *agentTruth) offersQuery(q Query) bool {
	for _, s := range a.offers {
		if q.Skill != "" && s.ID != q.Skill {
			continue
		}
		if slices.Contains(s.Capabilities, q.Capability) {
			return true
		}
	}
	return false
}

// isLive reports whether agent id is alive at at.
func (t *truth) isLive(id string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	return a != nil && a.liveAt(at)
}

// Returned is one provider a lookup returned.
type Returned struct {
	AgentID string
	// Source is where the resolver says the answer came from.
	Source string
	// Stale is set when the resolver itself marked the answer stale (an
	// expired cache entry).
	Stale bool
}

// Outcome is the score of one lookup against the truth at the moment it
// was issued.
type Outcome struct {
	// Expected are the live providers reachable from the querier (the
	// recall denominator); Found those of them returned.
	Expected int `json:"expected"`
	Found    int `json:"found"`
	// ExpectedAll and FoundAll ignore reachability (they differ only while
	// a partition lasts).
	ExpectedAll int `json:"expected_all_live"`
	FoundAll    int `json:"found_all_live"`
	// Returned counts distinct providers returned, split into Live (alive
	// at the query, or registered since), DeadRecent (dead for at most the
	// stale threshold), Stale (dead for longer) and Unknown (never
	// registered, or not offering what was asked: a resolver bug).
	Returned   int `json:"returned"`
	Live       int `json:"returned_live"`
	DeadRecent int `json:"returned_dead_within_timeout"`
	Stale      int `json:"returned_stale"`
	Unknown    int `json:"returned_unknown"`
	// StaleFlagged counts Stale results the resolver marked stale itself.
	StaleFlagged int `json:"returned_stale_flagged"`
	// Unreachable counts live providers returned that were on the other
	// side of a partition.
	Unreachable int `json:"returned_unreachable"`
}

// staleHit describes one stale result: where it came from and how long
// its agent had been dead.
type staleHit struct {
	source  string
	deadFor time.Duration
}

// score scores the providers returned to querier for q issued at at.
func (t *truth) score(q Query, querier int, at time.Time, returned []Returned) (Outcome, []staleHit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var o Outcome
	var hits []staleHit
	expected := map[string]bool{} // id → reachable
	for _, id := range t.order {
		a := t.agents[id]
		if !a.liveAt(at) || !a.offersQuery(q) {
			continue
		}
		r := t.reachableLocked(querier, a.node, at)
		expected[id] = r
		o.ExpectedAll++
		if r {
			o.Expected++
		}
	}
	seen := map[string]bool{}
	for _, r := range returned {
		if seen[r.AgentID] {
			continue
		}
		seen[r.AgentID] = true
		o.Returned++
		a := t.agents[r.AgentID]
		if a == nil {
			o.Unknown++
			continue
		}
		if reach, ok := expected[r.AgentID]; ok {
			o.Live++
			o.FoundAll++
			if reach {
				o.Found++
			} else {
				o.Unreachable++
			}
			continue
		}
		if a.liveAt(at) {
			// Alive but does not offer what was asked: the resolver's
			// filter is wrong. Count it with the unknowns.
			o.Unknown++
			continue
		}
		d, dead := a.deadFor(at)
		switch {
		case !dead:
			// Registered only after the query was issued.
			o.Live++
		case d > t.staleAfter:
			o.Stale++
			if r.Stale {
				o.StaleFlagged++
			}
			hits = append(hits, staleHit{source: r.Source, deadFor: d})
		default:
			o.DeadRecent++
		}
	}
	return o, hits
}

// add accumulates o into the receiver.
func (o *Outcome) add(x Outcome) {
	o.Expected += x.Expected
	o.Found += x.Found
	o.ExpectedAll += x.ExpectedAll
	o.FoundAll += x.FoundAll
	o.Returned += x.Returned
	o.Live += x.Live
	o.DeadRecent += x.DeadRecent
	o.Stale += x.Stale
	o.Unknown += x.Unknown
	o.StaleFlagged += x.StaleFlagged
	o.Unreachable += x.Unreachable
}

// Recall is Found ÷ Expected (1 when nothing was expected).
func (o Outcome) Recall() float64 { return ratio(o.Found, o.Expected, 1) }

// StaleRate is Stale ÷ Returned (0 when nothing was returned).
func (o Outcome) StaleRate() float64 { return ratio(o.Stale, o.Returned, 0) }

func ratio(a, b int, empty float64) float64 {
	if b == 0 {
		return empty
	}
	return float64(a) / float64(b)
}
