package lan

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxDiscoverFetches bounds the concurrent fetches of one Discover call.
const maxDiscoverFetches = 4

// Discover asks the LAN for agents matching f: it multicasts a
// SKILL_DISCOVER with the filter's capability, scene and type, collects
// SKILL_DISCOVER_RESPONSEs until DiscoverTimeout or ctx ends, and maps each
// listed skill to a verified record: one already known of an agent seen
// at the responder's address, or one fetched over /agentd/record/1.0.0
// from the libp2p peers at that address. The responses themselves are
// unsigned hints; only verified records are returned in signed. Verified
// records of live agents the LAN already knows (UDP and mDNS) that match
// are added. foreign holds the matching HMAC-authenticated skills of other
// implementations, grouped per agent (only with a shared key). Discover
// returns early once f.Limit signed records are found.
func (l *LAN) Discover(ctx context.Context, f store.Filter) (signed []*record.SignedAgent, foreign []*record.Agent, err error) {
	l.mu.Lock()
	closed, started := l.closed, l.started
	l.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	if !started {
		return nil, nil, fmt.Errorf("%w: not started", ErrUnavailable)
	}
	if ok, why := l.Available(); !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	m, err := f.Compile()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.DiscoverTimeout)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()

	c := &collector{m: m, limit: f.Limit, byID: map[string]*record.SignedAgent{}, done: make(chan struct{})}
	now := time.Now()
	for _, sa := range l.agents.records(now, l.cfg.UDP.Timeout.D()) {
		c.add(sa)
	}
	if l.udp != nil && l.sock(mechUDP) != nil && !c.full() {
		l.discoverUDP(ctx, f, c)
	}
	// Skills of other implementations: HMAC-authenticated, or proven by a
	// certificate challenge (challenge.go).
	for _, a := range l.foreign.agents(time.Now(), l.cfg.UDP.Timeout.D()) {
		if m.Matches(a) {
			foreign = append(foreign, a)
		}
	}
	return c.list(), foreign, nil
}

// discoverUDP sends the SKILL_DISCOVER and maps the responses until ctx
// ends or the collector is full.
func (l *LAN) discoverUDP(ctx context.Context, f store.Filter, c *collector) {
	u := l.udp
	q := record.SkillMessage{Type: record.MsgSkillDiscover, AgentID: l.requester, Timestamp: u.nextTS()}
	if f.Capability != "" && record.ValidIdent(f.Capability) {
		q.CapabilityFilter = []string{f.Capability}
	}
	if f.Scene != "" && record.ValidIdent(f.Scene) {
		q.SceneFilter = []string{f.Scene}
	}
	if t := record.SkillType(f.Type); t.Valid() {
		q.TypeFilter = []record.SkillType{t}
	}
	w := &waiter{ch: make(chan response, 64)}
	u.register(w)
	defer u.unregisterWaiter(w)
	if !u.send(&q) {
		return
	}
	var (
		wg      sync.WaitGroup
		sem     = make(chan struct{}, maxDiscoverFetches)
		fetched = map[peer.ID]bool{}
	)
	defer wg.Wait()
	for !c.full() {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case r := <-w.ch:
			ip := r.src.Addr()
			var missing bool
			for _, e := range r.msg.Skills {
				recs := l.agents.at(ip, e.SkillID)
				for _, sa := range recs {
					c.add(sa)
				}
				missing = missing || len(recs) == 0
			}
			if !missing || l.d.Fetch == nil {
				continue
			}
			skills := make([]string, len(r.msg.Skills))
			for i, e := range r.msg.Skills {
				skills[i] = e.SkillID
			}
			for _, p := range l.peersAt(ip) {
				if fetched[p.ID] {
					continue
				}
				fetched[p.ID] = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					select {
					case sem <- struct{}{}:
						defer func() { <-sem }()
					case <-ctx.Done():
						return
					}
					l.fetchListed(ctx, p, ip, skills, c)
				}()
			}
		}
	}
}

// fetchListed fetches every record peer p hosts and keeps the verified
// ones that offer one of the listed skills.
func (l *LAN) fetchListed(ctx context.Context, p peer.AddrInfo, ip netip.Addr, skills []string, c *collector) {
	recs, err := l.d.Fetch(ctx, p, "")
	if err != nil {
		l.count(mechUDP, "discover_fetch_error")
		l.log.Debug("fetch after a discovery response failed", "peer_id", p.ID, "err", err)
		return
	}
	for _, sa := range recs {
		if sa == nil || l.hosted.has(sa.Agent.AgentID) {
			continue
		}
		if !slices.ContainsFunc(skills, func(s string) bool { _, ok := sa.Agent.Skill(s); return ok }) {
			continue
		}
		if err := l.verify(sa, p.ID); err != nil {
			l.reject(mechUDP, trust.ReasonOf(err))
			continue
		}
		l.remember(sa, ip)
		c.add(sa)
	}
}

// remember keeps a verified record obtained for the LAN in the agent
// table.
func (l *LAN) remember(sa *record.SignedAgent, ip netip.Addr) {
	now := time.Now()
	t := l.agents
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryLocked(sa.Agent.AgentID, now)
	if e.rec == nil || sa.Agent.Seq >= e.rec.Agent.Seq {
		e.rec, e.hash = sa, sa.Hash()
	}
	e.lastSeen = now
	e.seenAt(ip)
}

// collector gathers the verified records of one Discover call: the
// matching ones, the newest per agent.
type collector struct {
	m     *store.Matcher
	limit int

	mu   sync.Mutex
	byID map[string]*record.SignedAgent
	done chan struct{} // closed when full
	once sync.Once
}

func (c *collector) add(sa *record.SignedAgent) {
	if sa == nil || !c.m.Matches(&sa.Agent) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id := sa.Agent.AgentID
	if old, ok := c.byID[id]; ok && old.Agent.Seq >= sa.Agent.Seq {
		return
	}
	if _, ok := c.byID[id]; !ok && c.limit > 0 && len(c.byID) >= c.limit {
		return
	}
	c.byID[id] = sa
	if c.limit > 0 && len(c.byID) >= c.limit {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *collector) full() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit > 0 && len(c.byID) >= c.limit
}

func (c *collector) list() []*record.SignedAgent {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*record.SignedAgent, 0, len(c.byID))
	for _, sa := range c.byID {
		out = append(out, sa)
	}
	slices.SortFunc(out, func(a, b *record.SignedAgent) int {
		switch {
		case a.Agent.AgentID < b.Agent.AgentID:
			return -1
		case a.Agent.AgentID > b.Agent.AgentID:
			return 1
		}
		return 0
	})
	return out
}
