package lan

import (
	"crypto/ecdsa"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"golang.org/x/time/rate"
)

// Bounds of the in-memory tables. Each evicts its least recently seen
// entry when full.
const (
	maxAgents  = 4096 // agentd agents seen on the LAN
	maxForeign = 1024 // HMAC-authenticated skills of other implementations
	maxPeers   = 1024 // libp2p peers found on the LAN
	maxSources = 4096 // rate-limiter buckets
	maxPending = 8    // datagrams held per agent while its record is obtained
	maxAddrs   = 4    // addresses remembered per agent or peer
)

// ---- rate limiting ----

// limiter is a token bucket per source IP address.
type limiter struct {
	mu    sync.Mutex
	r     rate.Limit
	burst int
	m     map[netip.Addr]*bucket
}

type bucket struct {
	l    *rate.Limiter
	seen time.Time
}

func newLimiter(perSec float64, burst int) *limiter {
	return &limiter{r: rate.Limit(perSec), burst: burst, m: map[netip.Addr]*bucket{}}
}

func (l *limiter) allow(src netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[src]
	if !ok {
		if len(l.m) >= maxSources {
			l.pruneLocked(now)
		}
		b = &bucket{l: rate.NewLimiter(l.r, l.burst)}
		l.m[src] = b
	}
	b.seen = now
	return b.l.AllowN(now, 1)
}

// pruneLocked drops the buckets idle long enough to be full again, and if
// that frees nothing, the least recently seen half.
func (l *limiter) pruneLocked(now time.Time) {
	full := time.Duration(float64(l.burst) / float64(l.r) * float64(time.Second))
	for k, b := range l.m {
		if now.Sub(b.seen) > full {
			delete(l.m, k)
		}
	}
	if len(l.m) < maxSources {
		return
	}
	type kv struct {
		k netip.Addr
		t time.Time
	}
	all := make([]kv, 0, len(l.m))
	for k, b := range l.m {
		all = append(all, kv{k, b.seen})
	}
	slices.SortFunc(all, func(a, b kv) int { return a.t.Compare(b.t) })
	for _, e := range all[:len(all)/2] {
		delete(l.m, e.k)
	}
}

// ---- agentd agents seen on the LAN ----

type tsKey struct {
	skill string
	typ   record.SkillMsgType
}

// agentEntry is what the LAN knows of one agentd agent.
type agentEntry struct {
	id   string
	rec  *record.SignedAgent // verified; nil until obtained
	hash [32]byte
	// addrs are the addresses the agent was seen at (datagram sources,
	// mDNS A records), newest first.
	addrs     []netip.Addr
	lastSeen  time.Time
	lastLearn time.Time
	// ts is the newest accepted timestamp per (skill, type): a datagram
	// that is not newer is a replay. maxTS is the newest of any type per
	// skill: an UNREGISTER older than it is stale.
	ts     map[tsKey]int64
	maxTS  map[string]int64
	status map[string]record.Status // per skill
	acked  map[string]bool          // skills answered with SUCCESS
	// gone is set by an accepted SKILL_UNREGISTER or mDNS goodbye; a newer
	// registration or heartbeat revives the agent.
	gone bool
	// Obtaining the record: at most one job per agent, held datagrams,
	// and a back-off after a failure.
	resolving   bool
	failedUntil time.Time
	failures    int // in a row; sets the next back-off (retryBackoff)
	pending     []pendingMsg
}

type pendingMsg struct {
	msg *record.SkillMessage
	src netip.AddrPort
}

func (e *agentEntry) seenAt(ip netip.Addr) {
	if !ip.IsValid() {
		return
	}
	if i := slices.Index(e.addrs, ip); i >= 0 {
		e.addrs = slices.Delete(e.addrs, i, i+1)
	}
	e.addrs = slices.Insert(e.addrs, 0, ip)
	if len(e.addrs) > maxAddrs {
		e.addrs = e.addrs[:maxAddrs]
	}
}

// fresh reports whether the entry's timestamp ts for (skill, typ) is newer
// than any accepted one; an UNREGISTER must also be at least as new as
// every message of the skill.
func (e *agentEntry) fresh(skill string, typ record.SkillMsgType, ts int64) bool {
	if last, ok := e.ts[tsKey{skill, typ}]; ok && ts <= last {
		return false
	}
	if typ == record.MsgSkillUnregister {
		if m, ok := e.maxTS[skill]; ok && ts < m {
			return false
		}
	}
	return true
}

func (e *agentEntry) accept(skill string, typ record.SkillMsgType, ts int64) {
	e.ts[tsKey{skill, typ}] = ts
	if ts > e.maxTS[skill] {
		e.maxTS[skill] = ts
	}
}

type agentTable struct {
	mu  sync.Mutex
	max int
	m   map[string]*agentEntry
}

func newAgentTable(max int) *agentTable {
	return &agentTable{max: max, m: map[string]*agentEntry{}}
}

// entry returns the entry of id, creating it (and evicting the least
// recently seen one when full). Callers hold t.mu.
func (t *agentTable) entryLocked(id string, now time.Time) *agentEntry {
	if e, ok := t.m[id]; ok {
		return e
	}
	if len(t.m) >= t.max {
		// Evict an agent whose record was never obtained first (anyone
		// can name an agent id in a datagram), the least recently seen.
		var oldest, oldestUnknown *agentEntry
		for _, e := range t.m {
			if oldest == nil || e.lastSeen.Before(oldest.lastSeen) {
				oldest = e
			}
			if e.rec == nil && (oldestUnknown == nil || e.lastSeen.Before(oldestUnknown.lastSeen)) {
				oldestUnknown = e
			}
		}
		if oldestUnknown != nil {
			oldest = oldestUnknown
		}
		delete(t.m, oldest.id)
	}
	e := &agentEntry{id: id, lastSeen: now, ts: map[tsKey]int64{}, maxTS: map[string]int64{},
		status: map[string]record.Status{}, acked: map[string]bool{}}
	t.m[id] = e
	return e
}

// expire drops the entries not seen for keep.
func (t *agentTable) expire(now time.Time, keep time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, e := range t.m {
		if now.Sub(e.lastSeen) > keep && !e.resolving {
			delete(t.m, id)
		}
	}
}

// records returns the verified records of the agents seen within alive and
// not gone.
func (t *agentTable) records(now time.Time, alive time.Duration) []*record.SignedAgent {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*record.SignedAgent
	for _, e := range t.m {
		if e.rec != nil && !e.gone && now.Sub(e.lastSeen) <= alive && e.rec.Agent.ExpiresAt().After(now) {
			out = append(out, e.rec)
		}
	}
	return out
}

// at returns the verified records of agents seen at ip that offer skillID.
func (t *agentTable) at(ip netip.Addr, skillID string) []*record.SignedAgent {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*record.SignedAgent
	for _, e := range t.m {
		if e.rec == nil || e.gone || !slices.Contains(e.addrs, ip) {
			continue
		}
		if _, ok := e.rec.Agent.Skill(skillID); ok {
			out = append(out, e.rec)
		}
	}
	return out
}

// hash returns the hash of the verified record held for id.
func (t *agentTable) hash(id string) ([32]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[id]; ok && e.rec != nil {
		return e.hash, true
	}
	return [32]byte{}, false
}

func (t *agentTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// ---- foreign (seed-001, HMAC) skills ----

type foreignKey struct{ agent, skill string }

type foreignSkill struct {
	agent    string
	skill    record.Skill
	src      netip.Addr
	lastSeen time.Time
	ts       map[record.SkillMsgType]int64
	maxTS    int64
	gone     bool
}

type foreignTable struct {
	mu  sync.Mutex
	max int
	m   map[foreignKey]*foreignSkill
	// keys are the ECDSA keys certificate challenges proved, by agentId
	// (challenge.go).
	keys map[string]*ecdsa.PublicKey
}

func newForeignTable(max int) *foreignTable {
	return &foreignTable{max: max, m: map[foreignKey]*foreignSkill{}, keys: map[string]*ecdsa.PublicKey{}}
}

// apply records an HMAC-verified message and reports whether it was news
// (not a replay). A heartbeat or status of an unknown skill is dropped
// (false): only a registration describes a skill.
func (t *foreignTable) apply(m *record.SkillMessage, src netip.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := foreignKey{m.AgentID, m.SkillID}
	f, ok := t.m[k]
	if ok {
		if last, seen := f.ts[m.Type]; seen && m.Timestamp <= last {
			return false
		}
		if m.Type == record.MsgSkillUnregister && m.Timestamp < f.maxTS {
			return false
		}
	}
	switch m.Type {
	case record.MsgSkillRegister:
		sk, err := m.Skill()
		if err != nil {
			return false
		}
		if !ok {
			if len(t.m) >= t.max {
				t.evictLocked()
			}
			f = &foreignSkill{agent: m.AgentID, ts: map[record.SkillMsgType]int64{}}
			t.m[k] = f
		}
		sk.Status = record.StatusHealthy
		if f.skill.Status != "" && !f.gone {
			sk.Status = f.skill.Status
		}
		f.skill, f.gone = sk, false
	case record.MsgSkillHeartbeat, record.MsgSkillStatus:
		if !ok || f.gone {
			return false
		}
		f.skill.Status = m.Status
	case record.MsgSkillUnregister:
		if !ok || f.gone {
			return false
		}
		f.gone = true
	default:
		return false
	}
	f.ts[m.Type] = m.Timestamp
	if m.Timestamp > f.maxTS {
		f.maxTS = m.Timestamp
	}
	f.src = src
	f.lastSeen = now
	return true
}

func (t *foreignTable) evictLocked() {
	var oldest foreignKey
	var ot time.Time
	first := true
	for k, f := range t.m {
		if first || f.lastSeen.Before(ot) {
			oldest, ot, first = k, f.lastSeen, false
		}
	}
	delete(t.m, oldest)
}

// expire drops skills not heard of for keep.
func (t *foreignTable) expire(now time.Time, keep time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, f := range t.m {
		if now.Sub(f.lastSeen) > keep {
			delete(t.m, k)
		}
	}
}

// ForeignNamespace is the record.ExternalAgentID namespace of the agent
// ids of seed-001 skills announced by other implementations.
const ForeignNamespace = "seed001"

// agents returns the live foreign skills grouped into agents: agent_id
// ExternalAgentID("seed001", agentId) with the original id in
// metadata.external_id, agent_name the id as a DNS label, one skill per
// registered skill, the agent-level capabilities map filled from them,
// and transport tcp to the first skill's endpoint. They carry no key and
// no signature: the shared HMAC key is their only authentication.
func (t *foreignTable) agents(now time.Time, alive time.Duration) []*record.Agent {
	t.mu.Lock()
	byAgent := map[string][]record.Skill{}
	for k, f := range t.m {
		if f.gone || now.Sub(f.lastSeen) > alive {
			continue
		}
		byAgent[k.agent] = append(byAgent[k.agent], f.skill)
	}
	t.mu.Unlock()
	ids := make([]string, 0, len(byAgent))
	for id := range byAgent {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*record.Agent, 0, len(ids))
	for _, id := range ids {
		skills := byAgent[id]
		slices.SortFunc(skills, func(a, b record.Skill) int {
			switch {
			case a.SkillID < b.SkillID:
				return -1
			case a.SkillID > b.SkillID:
				return 1
			}
			return 0
		})
		a := &record.Agent{
			AgentID:   record.ExternalAgentID(ForeignNamespace, id),
			AgentName: record.DNSLabel(id),
			Metadata:  map[string]any{record.MetaExternalID: id},
			Skills:    skills,
		}
		for _, s := range skills {
			if s.Endpoint != "" {
				a.Transport = record.Transport{Type: "tcp", Endpoint: s.Endpoint}
				break
			}
		}
		a.SyncCapabilities()
		out = append(out, a)
	}
	return out
}

// ---- libp2p peers found on the LAN ----

type peerEntry struct {
	id       peer.ID
	addrs    []ma.Multiaddr
	ips      []netip.Addr
	lastSeen time.Time
}

// peerBook remembers libp2p peers found by mDNS (agentd's own browser and
// libp2p's mDNS), so that an agent seen at an address can be fetched from
// the peer at that address.
type peerBook struct {
	mu  sync.Mutex
	max int
	m   map[peer.ID]*peerEntry
}

func newPeerBook(max int) *peerBook { return &peerBook{max: max, m: map[peer.ID]*peerEntry{}} }

// add records addrs for p.
func (b *peerBook) add(p peer.ID, addrs []ma.Multiaddr, now time.Time) {
	if p == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[p]
	if !ok {
		if len(b.m) >= b.max {
			var oldest *peerEntry
			for _, x := range b.m {
				if oldest == nil || x.lastSeen.Before(oldest.lastSeen) {
					oldest = x
				}
			}
			delete(b.m, oldest.id)
		}
		e = &peerEntry{id: p}
		b.m[p] = e
	}
	e.lastSeen = now
	for _, a := range addrs {
		if !slices.ContainsFunc(e.addrs, a.Equal) {
			e.addrs = append([]ma.Multiaddr{a}, e.addrs...)
		}
		if ip, ok := addrIP(a); ok && !slices.Contains(e.ips, ip) {
			e.ips = append([]netip.Addr{ip}, e.ips...)
		}
	}
	if len(e.addrs) > 2*maxAddrs {
		e.addrs = e.addrs[:2*maxAddrs]
	}
	if len(e.ips) > maxAddrs {
		e.ips = e.ips[:maxAddrs]
	}
}

// at returns the peers seen at ip, most recently seen first.
func (b *peerBook) at(ip netip.Addr) []peer.AddrInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var es []*peerEntry
	for _, e := range b.m {
		if slices.Contains(e.ips, ip) {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *peerEntry) int { return b.lastSeen.Compare(a.lastSeen) })
	out := make([]peer.AddrInfo, 0, len(es))
	for _, e := range es {
		out = append(out, peer.AddrInfo{ID: e.id, Addrs: slices.Clone(e.addrs)})
	}
	return out
}

func (b *peerBook) expire(now time.Time, keep time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, e := range b.m {
		if now.Sub(e.lastSeen) > keep {
			delete(b.m, id)
		}
	}
}

// addrIP returns the IPv4 address a multiaddr starts with.
func addrIP(a ma.Multiaddr) (netip.Addr, bool) {
	if a == nil {
		return netip.Addr{}, false
	}
	v, err := a.ValueForProtocol(ma.P_IP4)
	if err != nil {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip, true
}

// provenAt reports whether the agent's record was verified as coming from
// ip (a verified datagram, or a record fetched from its peer there).
func (l *LAN) provenAt(agentID string, ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	t := l.agents
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[agentID]
	return ok && slices.Contains(e.addrs, ip)
}
