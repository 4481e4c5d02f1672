// Package view is the node's live view of the network: which agents exist,
// which are alive and in what health, the registry events that describe
// every change (seed 004 §5), the capability projection (seed 004 §4.3) and
// scene resolution (seed 001 §4).
//
// Every transport feeds the view: gossip delivers announcements and
// heartbeats (the view implements gossip.Sink), DHT fetches, LAN discovery
// and the live-view sync hand it verified records through Learn, and the
// node applies local registrations with ApplyLocal. The view enforces the
// ordering rules (a record or beat is news only if its seq is newer than
// what is known and than the agent's tombstone), runs the liveness clock
// (seed 001 §8: UNHEALTHY after UnhealthyAfter missed heartbeats, gone after
// Timeout) and writes records through to the store's cache.
//
// Liveness: an agent is "live" from the moment a verified record or beat of
// it arrives until Timeout passes without news. Each beat says the sender's
// heartbeat interval; missed beats are counted against that interval, so a
// sender that slows its heartbeats (see docs/scaling.md) is not declared
// dead early. Local agents never time out.
package view

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Config configures the view. Zero values take the seed-001 defaults.
type Config struct {
	// HeartbeatInterval is the interval assumed for beats that do not state
	// one (default 5 s).
	HeartbeatInterval time.Duration
	// UnhealthyAfter is the number of missed heartbeats after which an
	// agent is marked UNHEALTHY (default 3).
	UnhealthyAfter int
	// Timeout is how long an agent stays in the live view without news
	// (default 30 s). It is scaled up for senders whose stated interval is
	// longer than HeartbeatInterval.
	Timeout time.Duration
	// SweepInterval is how often the liveness clock runs (default 500 ms).
	SweepInterval time.Duration
	// CacheTTL bounds the freshness of records written to the store
	// (default 300 s).
	CacheTTL time.Duration
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// MaxAgentsPerPeer bounds the remote agents one peer (the record's
	// peer_id, the peer that signed it) may have in the live view
	// (default 256). A record beyond it is refused and counted
	// (peer_quota): one peer cannot fill the view, the cache or the
	// heartbeat budget with agents it mints.
	//
	// It also bounds the hosted agents this node gossips (announcements,
	// heartbeats, sync answers): every peer admits that many of one peer,
	// so the ones beyond it would be refused as a flood from their author
	// (a penalty that graylists the node). The others are quiet: served
	// through the DHT and the LAN, never on gossip (see Agent.Quiet).
	MaxAgentsPerPeer int
	// MaxInterval returns the longest heartbeat interval a sender may
	// claim (default 12 x HeartbeatInterval). A longer claim is clamped to
	// it: a claim of a day would otherwise keep a silent agent live for
	// days. The node passes a bound derived from its own heartbeat budget.
	// It is called without the view's lock held (it may read the view).
	MaxInterval func() time.Duration

	// Vetted reports whether a peer has been reached over a connection of
	// its own (the node's libp2p connection authenticates its key). A new
	// agent heard on gossip or sync whose record names a peer not vetted
	// is held outside the live view (at most MaxPending records, each for
	// at most Timeout) and RequestVet is called; PeerVetted then admits
	// its records. Minting a peer key costs nothing, a reachable host
	// does: this is what bounds a flood of agents each signed by a fresh
	// peer key. Nil admits every peer (tests).
	Vetted     func(peerID string) bool
	RequestVet func(peerID string)
	MaxPending int
	// PrefixOf names the address prefix a vetted peer was reached at
	// ("" when it is not a public address); MaxAgentsPerPrefix (default
	// 1024) bounds the remote agents of all peers of one prefix.
	PrefixOf           func(peerID string) string
	MaxAgentsPerPrefix int
	// MaxUnbound bounds the agents without peer binding
	// (record.SignedAgent.Unbound: seed-000 agents that registered with a
	// registry or announced on the LAN) in the live view together
	// (default 4096); they count under no peer.
	MaxUnbound int

	// Late is called, from the liveness clock and without the view's lock,
	// with the remote agents of one peer that have been silent for
	// LateAfter of their heartbeat intervals, and again after each further
	// interval of silence until they time out: the node asks their host
	// for the heartbeats gossip may have lost (gossip.PullProtocol) before
	// the agent is marked UNHEALTHY or removed. Nil: nobody is asked.
	Late func(peerID string, agentIDs []string)
}

// LateAfter is the number of heartbeat intervals of silence after which
// Config.Late is called for an agent: one interval before the seed's three
// missed heartbeats mark it UNHEALTHY.
const LateAfter = 2

func (c *Config) defaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = 3
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 500 * time.Millisecond
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = 300 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxAgentsPerPeer <= 0 {
		c.MaxAgentsPerPeer = DefaultMaxAgentsPerPeer
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxAgentsPerPrefix <= 0 {
		c.MaxAgentsPerPrefix = DefaultMaxAgentsPerPrefix
	}
	if c.MaxUnbound <= 0 {
		c.MaxUnbound = DefaultMaxUnbound
	}
	if c.MaxInterval == nil {
		hb := c.HeartbeatInterval
		c.MaxInterval = func() time.Duration { return 12 * hb }
	}
}

// Defaults of the admission bounds (Config).
const (
	DefaultMaxAgentsPerPeer   = 256
	DefaultMaxAgentsPerPrefix = 1024
	DefaultMaxPending         = 1024
	DefaultMaxUnbound         = 4096
)

// clampInterval bounds a sender's claimed heartbeat interval (see
// Config.MaxInterval) and counts the clamp.
func (v *View) clampInterval(d time.Duration) time.Duration {
	if lim := max(v.cfg.MaxInterval(), v.cfg.HeartbeatInterval); d > lim {
		if v.m != nil {
			v.m.Reject("view", "interval_clamped")
		}
		return lim
	}
	return d
}

// Kind is the kind of a gossip message (mirrors gossip.Kind so this package
// does not import the transport).
type Kind = string

// Message kinds.
const (
	KindAnnounce   Kind = "announce"
	KindHeartbeat  Kind = "heartbeat"
	KindStatus     Kind = "status"
	KindUnregister Kind = "unregister"
)

// agentState is what the view knows about one agent. A registry holds
// 100 000 of them: its moments are instants (8 bytes, not a time.Time's
// 24), which takes it from 160 to 112 bytes.
type agentState struct {
	rec       *record.SignedAgent
	source    store.Source
	local     bool
	firstSeen instant
	lastHeard instant
	interval  time.Duration // the sender's heartbeat interval
	status    record.Status // status the agent reported (beats), "" = from record
	unhealthy bool          // marked by the liveness clock
	// quiet marks a hosted agent that is not gossiped (Config.MaxAgentsPerPeer).
	quiet bool
	// lateAsked is the number of silent intervals at which Config.Late was
	// last called (0: not since the agent was last heard; fits the padding
	// after the flags).
	lateAsked uint8
	beatSeq   uint64 // highest beat seq seen
	// prefix is the address prefix its peer was vetted at ("" none).
	prefix string
	// touched is the cache expiry last written to the store for this
	// agent. Beats extend it only once half the cache TTL is used up, not
	// on every beat (a store write per beat cost more CPU than anything
	// else the view does).
	touched instant
}

// instant is a moment as the time since the view's epoch (View.at, View.time).
type instant time.Duration

// at returns t as an instant of the view. On the monotonic clock when t
// has a reading (time.Now), like a time.Time's own comparisons.
func (v *View) at(t time.Time) instant { return instant(t.Sub(v.epoch)) }

// time returns the moment of an instant of the view.
func (v *View) time(i instant) time.Time { return v.epoch.Add(time.Duration(i)) }

// Agent is a snapshot of one live agent.
type Agent struct {
	Record *record.SignedAgent
	Source store.Source
	Local  bool
	// Quiet marks a hosted agent beyond the MaxAgentsPerPeer this node
	// gossips: found through the DHT and the LAN, not announced, beating
	// or synced on gossip.
	Quiet     bool
	FirstSeen time.Time
	LastHeard time.Time
	// Status is the effective agent status: UNHEALTHY when heartbeats were
	// missed, else what the agent reported, else HEALTHY.
	Status   record.Status
	Interval time.Duration
	// Relevance is the free-text score of a query answer (0 without a
	// text query): higher is a better match (view/text.go).
	Relevance float64
}

// View is the live view. Create it with New, start its liveness clock with
// Start, and stop it with Close.
type View struct {
	cfg     Config
	epoch   time.Time // the origin of the view's instants
	st      store.Store
	ver     *trust.Verifier
	m       *metrics.Metrics
	log     *slog.Logger
	hub     hub
	unknown func(agentID string, from peer.ID, interval time.Duration)

	mu     sync.Mutex
	agents map[string]*agentState
	// remote holds the agents that are not hosted here: the
	// liveness sweep walks them only, and counts the hosted ones by status
	// in localByStatus (by record.Status.Rank), so a registry node holding
	// 100 000 hosted agents does not walk them twice a second.
	remote        map[string]*agentState
	localByStatus [5]int
	// quietN counts the hosted agents that are quiet (agentState.quiet):
	// hosted beyond MaxAgentsPerPeer, not gossiped. gossiped holds the
	// others' ids: the heartbeat loop lists them every round.
	quietN   int
	gossiped map[string]struct{}
	perPeer  map[string]int // remote agents by the record's peer_id
	// peerInterval is the interval a peer with agents in the view last
	// claimed in a beat (clamped). A node beats all the agents it hosts at
	// one interval, so the liveness clock judges each of them by it: an
	// agent learnt from an announcement carries no interval, and a
	// registry's agents (100 s at 10 000) went UNHEALTHY 15 s after it by
	// the default 5 s, until their own first beat.
	peerInterval map[string]time.Duration
	perPrefix    map[string]int // remote agents by their peer's address prefix
	pending      map[string]*pendingRec
	// down: peers confirmed unreachable (DropPeer), when; until proof of
	// life (a beat or record it signed since, a connection: PeerUp) no
	// record of theirs enters the view from a neighbour's sync.
	down map[string]time.Time
	// dropped: the agents DropPeer removed of each peer in down (at most
	// MaxAgentsPerPeer each), returned by PeerUp so the node can ask the
	// peer for their heartbeats at once instead of waiting for the next
	// one on gossip.
	dropped map[string][]string
	// departed remembers the highest seq heard from remote agents that
	// left the view, until their last record expires (see departedLocked).
	departed departedSeqs
	proj     projection

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	ctx    context.Context // Start's, for the text index rebuild and store calls
	textWG sync.WaitGroup  // the text index rebuild (ResumeTextIndex)

	lastStoreWarn atomic.Int64 // unix ns of the last failed-store-write warning
}

// New creates a view over a store. ver is used to verify nothing here
// (transports verify before handing records over) except to look up keys;
// it may be nil.
func New(cfg Config, st store.Store, ver *trust.Verifier, m *metrics.Metrics, log *slog.Logger) *View {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &View{
		cfg: cfg, epoch: cfg.Now(), st: st, ver: ver, m: m, log: log.With("component", "view"),
		agents:       map[string]*agentState{},
		remote:       map[string]*agentState{},
		perPeer:      map[string]int{},
		peerInterval: map[string]time.Duration{},
		gossiped:     map[string]struct{}{},
		perPrefix:    map[string]int{},
		pending:      map[string]*pendingRec{},
		down:         map[string]time.Time{},
		dropped:      map[string][]string{},
		proj:         newProjection(),
	}
}

// OnUnknownAgent sets the function called when a beat arrives for an agent
// whose record is unknown; the node fetches the record from the sender.
// Set it before Start.
func (v *View) OnUnknownAgent(f func(agentID string, from peer.ID, interval time.Duration)) {
	v.unknown = f
}

// Start runs the liveness clock until Close.
func (v *View) Start(ctx context.Context) {
	ctx, v.cancel = context.WithCancel(ctx)
	v.ctx = ctx
	v.done = make(chan struct{})
	go func() {
		defer close(v.done)
		t := time.NewTicker(v.cfg.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				v.sweep()
			}
		}
	}()
}

// storeCtx is the context of the view's store calls: Start's, which Close
// cancels (the transports that feed the view are closed before it), or
// Background before Start.
func (v *View) storeCtx() context.Context {
	if v.ctx != nil {
		return v.ctx
	}
	return context.Background()
}

// touch moves a cached record's expiry. A record no longer cached is no
// error (the cache evicted it); any other failure (a full disk, a closed
// database) is logged, at warn level at most every 10 s.
func (v *View) touch(id string, expires time.Time) {
	err := v.st.Touch(v.storeCtx(), id, expires)
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, context.Canceled) {
		return
	}
	v.storeFailed("cache touch", id, err)
}

// storeFailed logs a failed cache write: the live view stays right (it is
// in memory), only what a restart or the resolver's cache step would read
// is behind.
func (v *View) storeFailed(op, id string, err error) {
	now := time.Now().UnixNano()
	if last := v.lastStoreWarn.Load(); now-last >= int64(10*time.Second) && v.lastStoreWarn.CompareAndSwap(last, now) {
		v.log.Warn(op+" failed (the live view is current; the cache is behind)", "agent_id", id, "err", err)
		return
	}
	v.log.Debug(op+" failed", "agent_id", id, "err", err)
}

// Close stops the clock and ends every subscription.
func (v *View) Close() error {
	v.once.Do(func() {
		if v.cancel != nil {
			v.cancel()
			<-v.done
		}
		v.textWG.Wait()
		v.hub.closeAll()
	})
	return nil
}

// Subscribe returns a subscription to the events matching f. buf is the
// channel buffer (default 256); a consumer that falls further behind is
// cut off with ErrLagged.
func (v *View) Subscribe(f Filter, buf int) *Subscription { return v.hub.subscribe(f, buf, nil) }

// SubscribeNotify is Subscribe with onClose, called once when the
// subscription ends (Close, a lagging consumer, or the view's Close).
func (v *View) SubscribeNotify(f Filter, buf int, onClose func()) *Subscription {
	return v.hub.subscribe(f, buf, onClose)
}

// ---- ordering checks (gossip validator) ----

func replay(format string, args ...any) error {
	return &trust.RejectError{Reason: trust.ReasonReplay, Detail: fmt.Sprintf(format, args...)}
}

// Holds reports whether the view holds exactly sa: a remote agent's
// record at sa's seq with the same canonical bytes and signatures (it
// implements gossip.RecordHolder: a resent announcement of a record held
// is forwarded without being verified again).
func (v *View) Holds(sa *record.SignedAgent) bool {
	v.mu.Lock()
	s := v.agents[sa.Agent.AgentID]
	var held *record.SignedAgent
	if s != nil && !s.local && s.rec != nil && s.rec.Agent.Seq == sa.Agent.Seq {
		held = s.rec
	}
	v.mu.Unlock()
	return held != nil && held.Hash() == sa.Hash() &&
		bytes.Equal(held.Signature, sa.Signature) && bytes.Equal(held.PeerSignature, sa.PeerSignature)
}

// CheckAnnounce reports whether a record is news: its seq must be newer
// than the record the view or the store holds and than the agent's
// tombstone.
func (v *View) CheckAnnounce(sa *record.SignedAgent) error {
	id, seq := sa.Agent.AgentID, sa.Agent.Seq
	v.mu.Lock()
	s := v.agents[id]
	if s == nil {
		if last, ok := v.departed.seq(id, v.cfg.Now()); ok && seq <= last {
			v.mu.Unlock()
			return replay("record seq %d of %s, which left the view at seq %d", seq, id, last)
		}
	}
	if s != nil {
		if s.local {
			v.mu.Unlock()
			return replay("agent %s is hosted by this node", id)
		}
		if seq <= s.rec.Agent.Seq {
			held := s.rec.Agent.Seq // read under the lock: the record may be replaced after it
			v.mu.Unlock()
			return replay("record seq %d of %s is not newer than %d", seq, id, held)
		}
	} else if err := v.quotaLocked(sa.Agent.PeerID); err != nil {
		v.mu.Unlock()
		return err
	}
	v.mu.Unlock()
	return v.checkStored(id, seq)
}

// quotaLocked refuses a new remote agent of a peer at its quota.
func (v *View) quotaLocked(peerID string) error {
	if peerID == "" {
		if n := v.perPeer[""]; n >= v.cfg.MaxUnbound {
			return &trust.RejectError{Reason: trust.ReasonPeerQuota,
				Detail: fmt.Sprintf("the live view already has %d agents without peer binding, the most it may have", n)}
		}
		return nil
	}
	if n := v.perPeer[peerID]; n >= v.cfg.MaxAgentsPerPeer {
		return &trust.RejectError{Reason: trust.ReasonPeerQuota,
			Detail: fmt.Sprintf("peer %s already has %d agents in the live view, the most one peer may have", record.Truncate(peerID, 64), n)}
	}
	return nil
}

// hostLocked counts an agent that becomes hosted here, quiet when this
// node already gossips MaxAgentsPerPeer of its hosted agents.
func (v *View) hostLocked(s *agentState) {
	s.quiet = len(v.gossiped) >= v.cfg.MaxAgentsPerPeer
	if s.quiet {
		v.quietN++
	} else {
		v.gossiped[s.rec.Agent.AgentID] = struct{}{}
	}
	v.localByStatus[v.effective(s).Rank()]++
}

// addLocked and delLocked insert and remove an agent, keeping the
// per-peer and per-prefix counts of remote agents.
func (v *View) addLocked(s *agentState) {
	if seq, ok := v.departed.take(s.rec.Agent.AgentID); ok {
		s.beatSeq = max(s.beatSeq, seq)
	}
	v.agents[s.rec.Agent.AgentID] = s
	if s.local {
		v.hostLocked(s)
	} else {
		v.remote[s.rec.Agent.AgentID] = s
	}
	v.countLocked(s)
}

func (v *View) delLocked(s *agentState) {
	delete(v.agents, s.rec.Agent.AgentID)
	if s.local {
		v.localByStatus[v.effective(s).Rank()]--
		if s.quiet {
			v.quietN--
		} else {
			delete(v.gossiped, s.rec.Agent.AgentID)
		}
	} else {
		delete(v.remote, s.rec.Agent.AgentID)
		a := &s.rec.Agent
		v.departed.add(a.AgentID, max(s.beatSeq, a.Seq), a.Issued().Add(time.Duration(a.TTLSeconds)*time.Second))
	}
	v.uncountLocked(s)
}

// departedSeqs remembers, for remote agents that left the live view (timed
// out, dropped, pruned, forgotten), the highest seq heard from each, until
// the agent's last record expires. A beat is news only above it: pubsub
// forgets a message id after its seen-TTL (30 s, no longer than the
// liveness timeout), so anyone who kept an agent's signed heartbeat could
// send it again once the agent timed out, and the view would restore the
// cached record and keep a dead agent alive for as long as the replays
// went on. After the record expires it cannot be restored anyway. Bounded:
// past maxDeparted the oldest departure is forgotten first.
type departedSeqs struct {
	m     map[string]departedSeq
	order []string // ids in order of departure; may hold ids taken since
}

type departedSeq struct {
	seq   uint64
	until time.Time
}

const maxDeparted = 1 << 16

func (d *departedSeqs) add(id string, seq uint64, until time.Time) {
	if d.m == nil {
		d.m = map[string]departedSeq{}
	}
	if _, ok := d.m[id]; !ok {
		d.order = append(d.order, id)
	}
	d.m[id] = departedSeq{seq: seq, until: until}
	for len(d.m) > maxDeparted && len(d.order) > 0 {
		delete(d.m, d.order[0])
		d.order = d.order[1:]
	}
}

// seq returns the departed agent's last seq, if it left and its record has
// not expired by now.
func (d *departedSeqs) seq(id string, now time.Time) (uint64, bool) {
	e, ok := d.m[id]
	if !ok || !now.Before(e.until) {
		return 0, false
	}
	return e.seq, true
}

// take forgets id and returns its last seq: the agent is back.
func (d *departedSeqs) take(id string) (uint64, bool) {
	e, ok := d.m[id]
	if ok {
		delete(d.m, id)
	}
	return e.seq, ok
}

// prune forgets the departures whose records have expired, oldest first,
// and compacts the order once most of it is ids taken since.
func (d *departedSeqs) prune(now time.Time) {
	for len(d.order) > 0 {
		e, ok := d.m[d.order[0]]
		if ok && now.Before(e.until) {
			break
		}
		if ok {
			delete(d.m, d.order[0])
		}
		d.order = d.order[1:]
	}
	if len(d.order) > 64 && len(d.order) > 2*len(d.m) {
		live := make([]string, 0, len(d.m))
		for _, id := range d.order {
			if _, ok := d.m[id]; ok {
				live = append(live, id)
			}
		}
		d.order = live
	}
}

// countLocked counts a remote agent under its peer and prefix;
// uncountLocked takes it out again (before it changes peer, becomes local
// or leaves).
func (v *View) countLocked(s *agentState) {
	if s.local {
		return
	}
	v.perPeer[s.rec.Agent.PeerID]++
	if s.prefix != "" {
		v.perPrefix[s.prefix]++
	}
}

func (v *View) uncountLocked(s *agentState) {
	if s.local {
		return
	}
	if p := s.rec.Agent.PeerID; v.perPeer[p] <= 1 {
		delete(v.perPeer, p)
		delete(v.peerInterval, p)
	} else {
		v.perPeer[p]--
	}
	if s.prefix != "" {
		if v.perPrefix[s.prefix] <= 1 {
			delete(v.perPrefix, s.prefix)
		} else {
			v.perPrefix[s.prefix]--
		}
		s.prefix = ""
	}
}

// admitLocked applies the per-peer and per-prefix quotas to a new remote
// agent, counting a refusal.
func (v *View) admitLocked(peerID, prefix string) error {
	err := v.quotaLocked(peerID)
	if err == nil {
		err = v.prefixQuotaLocked(prefix)
	}
	if err != nil {
		v.m.Reject("view", string(trust.ReasonOf(err)))
	}
	return err
}

// prefixQuotaLocked refuses a new remote agent of a prefix at its quota.
func (v *View) prefixQuotaLocked(prefix string) error {
	if prefix == "" {
		return nil
	}
	if n := v.perPrefix[prefix]; n >= v.cfg.MaxAgentsPerPrefix {
		return &trust.RejectError{Reason: ReasonPrefixQuota,
			Detail: fmt.Sprintf("address prefix %s already has %d agents in the live view, the most one prefix may have", prefix, n)}
	}
	return nil
}

// Admission reasons counted under transport "view".
const (
	ReasonPrefixQuota trust.Reason = "prefix_quota"
	ReasonUnvetted    trust.Reason = "unvetted_expired" // held, its peer never reached
	ReasonPendingFull trust.Reason = "pending_full"
	// ReasonPeerDown refuses a neighbour's copy of a record whose peer
	// was confirmed unreachable (and has not been heard from since).
	ReasonPeerIsDown trust.Reason = "peer_down"
)

// pendingRec is a record held until its peer is vetted.
type pendingRec struct {
	sa       *record.SignedAgent
	src      store.Source
	heard    time.Time
	interval time.Duration
	at       time.Time
}

// hold keeps a record of a peer not yet vetted and asks for the vetting.
// It reports false when the record was refused (the pending set is full).
func (v *View) hold(sa *record.SignedAgent, src store.Source, heard time.Time, interval time.Duration, now time.Time) bool {
	id := sa.Agent.AgentID
	v.mu.Lock()
	if p, ok := v.pending[id]; ok {
		if sa.Agent.Seq >= p.sa.Agent.Seq {
			p.sa, p.src, p.interval = sa, src, interval
			if heard.After(p.heard) {
				p.heard = heard
			}
		}
		v.mu.Unlock()
		return true
	}
	if len(v.pending) >= v.cfg.MaxPending {
		v.mu.Unlock()
		v.m.Reject("view", string(ReasonPendingFull))
		return false
	}
	v.pending[id] = &pendingRec{sa: sa, src: src, heard: heard, interval: interval, at: now}
	v.mu.Unlock()
	if v.cfg.RequestVet != nil {
		v.cfg.RequestVet(sa.Agent.PeerID)
	}
	return true
}

// PeerVetted admits the held records of a peer that has been reached.
func (v *View) PeerVetted(peerID string) {
	now := v.cfg.Now()
	var recs []*pendingRec
	v.mu.Lock()
	for id, p := range v.pending {
		if p.sa.Agent.PeerID == peerID {
			recs = append(recs, p)
			delete(v.pending, id)
		}
	}
	v.mu.Unlock()
	for _, p := range recs {
		_ = v.learnHeard(p.sa, p.src, true, max(now.Sub(p.heard), 0), p.interval)
	}
}

// Held reports whether a record of agentID is held until its peer is
// reached (Config.Vetted), with that peer and since when.
func (v *View) Held(agentID string) (peerID string, since time.Time, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p, ok := v.pending[agentID]
	if !ok {
		return "", time.Time{}, false
	}
	return p.sa.Agent.PeerID, p.at, true
}

// Pending returns the number of records held for vetting.
func (v *View) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.pending)
}

// vetted reports whether a record's peer may enter the live view now.
func (v *View) vetted(peerID string) bool {
	return v.cfg.Vetted == nil || v.cfg.Vetted(peerID)
}

func (v *View) prefixOf(peerID string) string {
	if v.cfg.PrefixOf == nil || peerID == "" {
		return ""
	}
	return v.cfg.PrefixOf(peerID)
}

func (v *View) checkStored(id string, seq uint64) error {
	ctx := v.storeCtx()
	if t, ok, err := v.st.GetTombstone(ctx, id); err == nil && ok && seq <= t.Seq {
		return replay("seq %d of %s is covered by its unregistration (seq %d)", seq, id, t.Seq)
	}
	return nil
}

// CheckBeat reports whether a beat is news: newer than every beat and the
// record seen for the agent and than its tombstone.
func (v *View) CheckBeat(kind Kind, sb *record.SignedBeat) error {
	id, seq := sb.Beat.AgentID, sb.Beat.Seq
	v.mu.Lock()
	s := v.agents[id]
	if s == nil {
		if last, ok := v.departed.seq(id, v.cfg.Now()); ok && seq <= last {
			v.mu.Unlock()
			return replay("%s seq %d of %s, which left the view at seq %d", kind, seq, id, last)
		}
	}
	if s != nil {
		if s.local {
			v.mu.Unlock()
			return replay("agent %s is hosted by this node", id)
		}
		if seq <= s.beatSeq || seq < s.rec.Agent.Seq {
			held := max(s.beatSeq, s.rec.Agent.Seq)
			v.mu.Unlock()
			return replay("%s seq %d of %s is not newer than %d", kind, seq, id, held)
		}
		if sb.PeerBound() && sb.Beat.PeerID != s.rec.Agent.PeerID {
			v.mu.Unlock()
			return &trust.RejectError{Reason: trust.ReasonPeerMismatch, Detail: fmt.Sprintf("beat of %s from %s, which does not host its record", id, sb.Beat.PeerID)}
		}
	}
	v.mu.Unlock()
	if err := v.checkStored(id, seq); err != nil || s != nil || !sb.PeerBound() {
		return err
	}
	// Not in the live view (timed out, or never heard): a beat that speaks
	// for its peer must still name the peer of the record the cache holds,
	// or a peer could keep beats going for agents it does not host.
	if e, err := v.st.Get(v.storeCtx(), id); err == nil && e.Record.Agent.PeerID != sb.Beat.PeerID {
		return &trust.RejectError{Reason: trust.ReasonPeerMismatch, Detail: fmt.Sprintf("beat of %s from %s, which does not host its record", id, sb.Beat.PeerID)}
	}
	return nil
}

// ---- inputs ----

// Announce applies a verified announcement received by gossip.
func (v *View) Announce(sa *record.SignedAgent, _ peer.ID, _ string) {
	_ = v.learn(sa, store.SourceGossip, true) // not news: the validator's check raced another path
}

// Synced applies a verified record learnt from neighbours' live views at
// join (gossip's sync protocol), last heard from age ago by the freshest
// neighbour, from an agent that beats every interval (0: the default).
// It is evidence of life that old, not proof of life now: the agent's
// liveness clock starts that far back, so an agent that died just before
// this node joined times out here when it does at the neighbours. A
// record whose age is already past the timeout only goes to the cache.
func (v *View) Synced(sa *record.SignedAgent, age, interval time.Duration) error {
	return v.learnHeard(sa, store.SourceGossip, true, max(age, 0), interval)
}

// LiveRecord is one agent of the live view as a sync answer carries it.
type LiveRecord struct {
	Record *record.SignedAgent
	// Age is how long ago the agent was last heard from (zero for an
	// agent hosted here); Interval is its heartbeat interval (for an
	// agent hosted here, the base interval: the node knows the one its
	// budget gives).
	Age, Interval time.Duration
	// Local says the agent is hosted here.
	Local bool
}

// LiveRecords returns up to limit records of live agents (local ones
// first), each with how long ago it was last heard from and its
// heartbeat interval; it answers gossip's sync requests. Quiet hosted
// agents are left out: they are not gossiped. When keep is not nil, only
// the agents it accepts are returned.
func (v *View) LiveRecords(limit int, keep func(*record.Agent) bool) []LiveRecord {
	now := v.cfg.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]LiveRecord, 0, min(limit, len(v.agents)))
	for _, local := range []bool{true, false} {
		for _, s := range v.agents {
			if len(out) >= limit {
				return out
			}
			// A record without peer binding is never forwarded: the peer
			// it reached would refuse it (trust.ReasonUnbound).
			if s.local != local || s.quiet || s.rec.Unbound() || (keep != nil && !keep(&s.rec.Agent)) {
				continue
			}
			lr := LiveRecord{Record: s.rec, Interval: s.interval, Local: s.local}
			if !s.local {
				lr.Age = max(now.Sub(v.time(s.lastHeard)), 0)
			}
			out = append(out, lr)
		}
	}
	return out
}

// Learn applies a verified record from a DHT fetch, the LAN or a catalog.
// live says whether the record proves the agent alive now (a successful
// fetch from its host does; a catalog entry does not); records that are
// not live only go to the store's cache. It returns an error when the
// record is not news (stale seq, tombstoned, hosted here).
func (v *View) Learn(sa *record.SignedAgent, src store.Source, live bool) error {
	return v.learn(sa, src, live)
}

// LearnFetched applies a verified record its host answered a fetch with
// just now, for an agent whose beat claimed interval (0: none; clamped
// like any claim): the agent is judged by that interval from the start.
func (v *View) LearnFetched(sa *record.SignedAgent, interval time.Duration) error {
	return v.learnHeard(sa, store.SourceGossip, true, 0, interval)
}

// LearnUnbound applies a verified record without peer binding
// (record.SignedAgent.Unbound, stamped by StampUnbound) that its agent
// announced to this node: through a registry's POST /agents or WebSocket,
// or on the LAN. It lives while the agent re-announces it (each
// announcement proves life as a heartbeat does) and is never forwarded.
// An announcement whose agent object is byte for byte the one held only
// refreshes it, so a re-announcing agent causes no update events and no
// cache writes. A bound record of the same agent is not replaced.
func (v *View) LearnUnbound(sa *record.SignedAgent, src store.Source) error {
	if !sa.Unbound() {
		return fmt.Errorf("view: LearnUnbound of a record bound to peer %s", sa.Agent.PeerID)
	}
	v.mu.Lock()
	if s := v.agents[sa.Agent.AgentID]; s != nil && !s.local && s.rec.Unbound() && bytes.Equal(s.rec.Canonical(), sa.Canonical()) {
		sa = s.rec
	}
	v.mu.Unlock()
	return v.learnHeard(sa, src, true, 0, 0)
}

func (v *View) learn(sa *record.SignedAgent, src store.Source, live bool) error {
	return v.learnHeard(sa, src, live, 0, 0)
}

// learnHeard applies a record last heard from age ago, whose agent beats
// every interval (0: unknown, the default interval applies).
func (v *View) learnHeard(sa *record.SignedAgent, src store.Source, live bool, age, interval time.Duration) error {
	err := v.learnHeard0(sa, src, live, age, interval)
	// A replay is a copy already applied (another path, a refetch): not
	// news, and not a refusal an operator needs to see.
	if err != nil && trust.ReasonOf(err) != trust.ReasonReplay {
		v.ver.NoteRecord(sa, "view", "", err)
	}
	return err
}

func (v *View) learnHeard0(sa *record.SignedAgent, src store.Source, live bool, age, interval time.Duration) error {
	a := &sa.Agent
	now := v.cfg.Now()
	if interval <= 0 {
		interval = v.cfg.HeartbeatInterval
	}
	interval = v.clampInterval(interval)
	heard := now.Add(-age)
	// A new agent of a peer at its quota is refused before it costs a
	// cache write (checked again on insertion); one of a peer not yet
	// reached is held until it is (Config.Vetted).
	v.mu.Lock()
	if t, ok := v.downLocked(a.PeerID, now); ok && live {
		if !a.Issued().After(t) {
			v.mu.Unlock()
			v.m.Reject("view", string(ReasonPeerIsDown))
			return &trust.RejectError{Reason: ReasonPeerIsDown, Detail: fmt.Sprintf("peer %s of agent %s was confirmed unreachable and has not been heard from since", a.PeerID, a.AgentID)}
		}
		v.liveLocked(a.PeerID) // signed since: it lives
	}
	newAgent := false
	if s := v.agents[a.AgentID]; s == nil || s.rec.Agent.PeerID != a.PeerID {
		newAgent = true
		if err := v.admitLocked(a.PeerID, ""); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	v.mu.Unlock()
	if newAgent && live && src == store.SourceGossip && !v.vetted(a.PeerID) {
		if !v.hold(sa, src, heard, interval, now) {
			return &trust.RejectError{Reason: ReasonPendingFull, Detail: "too many records of peers not yet reached are held"}
		}
		return nil
	}
	prefix := v.prefixOf(a.PeerID)
	silent := live && age > v.TimeoutFor(interval)
	if err := v.putStore(sa, src, now); err != nil && !errors.Is(err, store.ErrOlder) {
		// ErrOlder: the cache holds a newer record, yet the view may not
		// (restart); the view's own seq check below decides.
		if errors.Is(err, store.ErrTombstoned) {
			return replay("agent %s was unregistered", a.AgentID)
		}
		v.storeFailed("cache write", a.AgentID, err)
	}
	if silent {
		// Silent past the timeout as far as anyone knows: cached, and
		// stale at once, as the record of an agent that left the view.
		v.touch(a.AgentID, now)
		return nil
	}
	if !live {
		return nil
	}
	var events []Event
	v.mu.Lock()
	s := v.agents[a.AgentID]
	switch {
	case s != nil && s.local:
		v.mu.Unlock()
		return replay("agent %s is hosted by this node", a.AgentID)
	case s != nil && sa.Unbound() && !s.rec.Unbound():
		held := s.rec.Agent.PeerID
		v.mu.Unlock()
		return &trust.RejectError{Reason: trust.ReasonUnbound,
			Detail: fmt.Sprintf("agent %s is live with a record bound to peer %s; a record without peer binding does not replace it", a.AgentID, held)}
	case s != nil && a.Seq < s.rec.Agent.Seq && (!s.rec.Unbound() || sa.Unbound()):
		// (A bound record replaces an unbound one whatever their seqs:
		// the unbound one's was stamped by the receiving node.)
		held := s.rec.Agent.Seq
		v.mu.Unlock()
		return replay("record seq %d of %s is older than %d", a.Seq, a.AgentID, held)
	case s != nil && a.Seq == s.rec.Agent.Seq && sa.Unbound() == s.rec.Unbound():
		// Same record again (another path, a refetch): it proves life.
		if h := v.at(heard); h > s.lastHeard {
			s.lastHeard = h
			events = v.reviveLocked(s, now, events)
		}
	case s != nil:
		old := s.rec
		if old.Agent.PeerID != a.PeerID {
			if err := v.admitLocked(a.PeerID, prefix); err != nil {
				v.mu.Unlock()
				return err
			}
			v.uncountLocked(s)
			s.rec, s.prefix = sa, prefix
			v.countLocked(s)
		}
		s.rec, s.source = sa, src
		if h := v.at(heard); h > s.lastHeard {
			s.lastHeard = h
			events = v.reviveLocked(s, now, events)
		}
		events = append(events, v.proj.update(old, sa, v.effective(s), now)...)
		if !sameCapabilities(&old.Agent, a) || old.Agent.Version != a.Version {
			events = append(events, v.agentEvent(EventRegistered, s, now, ""))
		}
	default:
		if err := v.admitLocked(a.PeerID, prefix); err != nil {
			v.mu.Unlock()
			return err
		}
		s = &agentState{rec: sa, source: src, firstSeen: v.at(now), lastHeard: v.at(heard), interval: interval, prefix: prefix}
		// Silent for long already (a synced record): UNHEALTHY from the
		// start, as the liveness clock would mark it.
		s.unhealthy = age > time.Duration(v.cfg.UnhealthyAfter)*max(interval, v.cfg.HeartbeatInterval)
		v.addLocked(s)
		events = append(events, v.agentEvent(EventRegistered, s, now, ""))
		events = append(events, v.proj.update(nil, sa, v.effective(s), now)...)
	}
	if until := v.at(v.freshUntil(sa, now)); until > s.touched {
		s.touched = until // putStore wrote it
	}
	v.mu.Unlock()
	v.emit(events)
	return nil
}

// Beat applies a verified heartbeat, status or unregister statement.
func (v *View) Beat(kind Kind, sb *record.SignedBeat, from peer.ID, _ string) {
	b := &sb.Beat
	now := v.cfg.Now()
	if kind == KindUnregister {
		v.unregister(b.AgentID, b.Seq, b.Reason, now)
		return
	}
	var claimed time.Duration // clamped outside the lock: MaxInterval may read the view
	if d := b.Interval(); d > 0 {
		claimed = v.clampInterval(d)
	}
	v.mu.Lock()
	if t, ok := v.downLocked(b.PeerID, now); ok && b.Time().After(t) {
		v.liveLocked(b.PeerID) // a beat signed since it was found down
	}
	if claimed > 0 && b.PeerID == from.String() && v.perPeer[b.PeerID] > 0 {
		v.peerInterval[b.PeerID] = claimed
	}
	s := v.agents[b.AgentID]
	if s == nil {
		last, departed := v.departed.seq(b.AgentID, now)
		v.mu.Unlock()
		if departed && b.Seq <= last {
			return // a replay of a beat from before the agent left
		}
		// Known key (the verifier passed) but not in the live view: a
		// restart, or an agent that timed out and came back. Restore it
		// from the cache if we can, else fetch it from its host.
		if e, err := v.st.Get(v.storeCtx(), b.AgentID); err == nil && e.Record.Agent.Seq <= b.Seq &&
			(!sb.PeerBound() || e.Record.Agent.PeerID == b.PeerID) {
			_ = v.learn(e.Record, e.Source, true) // not news: the check below finds it
			v.mu.Lock()
			s = v.agents[b.AgentID]
			if s == nil {
				v.mu.Unlock()
				return
			}
		} else {
			v.fetchUnknown(b.AgentID, b.PeerID, from, claimed)
			return
		}
	}
	if s.local || b.Seq <= s.beatSeq || (sb.PeerBound() && b.PeerID != s.rec.Agent.PeerID) {
		v.mu.Unlock()
		return
	}
	var events []Event
	s.beatSeq = b.Seq
	s.lastHeard = v.at(now)
	if claimed > 0 {
		s.interval = claimed
	}
	before := v.effective(s)
	s.unhealthy = false
	if b.Status != "" {
		s.status = b.Status
	}
	after := v.effective(s)
	if kind == KindHeartbeat {
		events = append(events, v.agentEvent(EventHeartbeat, s, now, ""))
	}
	if before != after || kind == KindStatus {
		events = append(events, v.agentEvent(EventStatus, s, now, ""))
		events = append(events, v.proj.setStatus(s.rec, after)...)
	}
	// Extend the cached record's freshness once half of it is used up:
	// while the agent beats its entry never goes stale, and the store is
	// written about once per CacheTTL/2 per agent instead of per beat.
	var touch time.Time
	if until := v.freshUntil(s.rec, now); time.Duration(s.touched-v.at(now)) < v.cfg.CacheTTL/2 && v.at(until) > s.touched {
		touch, s.touched = until, v.at(until)
	}
	v.mu.Unlock()
	if !touch.IsZero() {
		v.touch(b.AgentID, touch)
	}
	v.emit(events)
}

// UnknownAgent forwards a beat of an agent whose key is unknown, with the
// interval it claimed.
func (v *View) UnknownAgent(agentID string, from peer.ID, interval time.Duration) {
	v.fetchUnknown(agentID, from.String(), from, interval)
}

// fetchUnknown asks for the record of an agent heard of but not held,
// unless its peer is at its quota: the record could not be admitted, and
// asking again at every beat of every such agent would cost the host a
// signed answer each time (a registry node hosting thousands).
func (v *View) fetchUnknown(agentID, peerID string, from peer.ID, interval time.Duration) {
	if v.unknown == nil {
		return
	}
	v.mu.Lock()
	full := v.quotaLocked(peerID) != nil
	v.mu.Unlock()
	if full {
		return
	}
	v.unknown(agentID, from, interval)
}

// ApplyLocal adds or replaces a registration hosted by this node.
func (v *View) ApplyLocal(sa *record.SignedAgent) {
	now := v.cfg.Now()
	var events []Event
	v.mu.Lock()
	s := v.agents[sa.Agent.AgentID]
	if s == nil {
		s = &agentState{rec: sa, source: store.SourceLocal, local: true, firstSeen: v.at(now), lastHeard: v.at(now), interval: v.cfg.HeartbeatInterval}
		v.addLocked(s)
		events = append(events, v.agentEvent(EventRegistered, s, now, ""))
		events = append(events, v.proj.update(nil, sa, v.effective(s), now)...)
	} else {
		old := s.rec
		v.uncountLocked(s) // a remote agent now hosted here leaves its peer's and prefix's quota
		wasLocal := s.local
		if wasLocal {
			v.localByStatus[v.effective(s).Rank()]--
		}
		delete(v.remote, sa.Agent.AgentID)
		s.rec, s.local, s.source, s.lastHeard, s.unhealthy = sa, true, store.SourceLocal, v.at(now), false
		if wasLocal {
			v.localByStatus[v.effective(s).Rank()]++ // quiet or gossiped as before
		} else {
			v.hostLocked(s)
		}
		events = append(events, v.proj.update(old, sa, v.effective(s), now)...)
		events = append(events, v.agentEvent(EventRegistered, s, now, ""))
	}
	v.mu.Unlock()
	v.emit(events)
}

// SetLocalStatus records the status a local agent reports.
func (v *View) SetLocalStatus(agentID string, st record.Status) {
	now := v.cfg.Now()
	var events []Event
	v.mu.Lock()
	if s := v.agents[agentID]; s != nil && s.local && s.status != st {
		v.localByStatus[v.effective(s).Rank()]--
		s.status = st
		v.localByStatus[v.effective(s).Rank()]++
		events = append(events, v.agentEvent(EventStatus, s, now, ""))
		events = append(events, v.proj.setStatus(s.rec, v.effective(s))...)
	}
	v.mu.Unlock()
	v.emit(events)
}

// Forget removes a remote agent from the live view: a departure seen on
// a transport that carries no seq to tombstone (an mDNS goodbye, a
// seed-001 SKILL_UNREGISTER). Local agents are never forgotten this way.
func (v *View) Forget(agentID, reason string) {
	now := v.cfg.Now()
	var events []Event
	v.mu.Lock()
	s := v.agents[agentID]
	forgot := s != nil && !s.local
	if forgot {
		v.delLocked(s)
		events = append(events, v.agentEvent(EventDeregistered, s, now, reason))
		events = append(events, v.proj.update(s.rec, nil, "", now)...)
	}
	v.mu.Unlock()
	if forgot {
		v.touch(agentID, now)
	}
	v.emit(events)
}

// DropPeer removes every remote agent of peer p from the live view, and
// the records of p held until p is reached: the node confirmed that p
// cannot be reached (package liveness). The cached records become stale
// at once, as those of agents that timed out. Until p shows life (PeerUp,
// or a beat or record it signed after now) — at most twice the liveness
// timeout — a neighbour's copy of its records is refused, so a sync with
// a node that has not dropped them yet cannot bring them back. Its agents
// return with their next heartbeat (restored from the cache). It returns
// how many agents left.
func (v *View) DropPeer(p peer.ID, reason string) int {
	ps := p.String()
	now := v.cfg.Now()
	var events []Event
	var gone []string
	v.mu.Lock()
	v.down[ps] = now
	if v.perPeer[ps] > 0 {
		for id, s := range v.agents {
			if s.local || s.rec.Agent.PeerID != ps {
				continue
			}
			v.delLocked(s)
			gone = append(gone, id)
			events = append(events, v.agentEvent(EventDeregistered, s, now, reason))
			events = append(events, v.proj.update(s.rec, nil, "", now)...)
		}
	}
	for id, h := range v.pending {
		if h.sa.Agent.PeerID == ps {
			delete(v.pending, id)
		}
	}
	if len(gone) > 0 {
		d := append(v.dropped[ps], gone...)
		v.dropped[ps] = d[:min(len(d), v.cfg.MaxAgentsPerPeer)]
	}
	v.mu.Unlock()
	for _, id := range gone {
		v.touch(id, now)
	}
	v.emit(events)
	return len(gone)
}

// Prune forgets the remote agents keep refuses: a scoped node calls it
// when its interest shrinks, for agents it no longer wants to hear of.
// Nothing is emitted (no watch of this node covers them: a watch holds
// its capability's interest), and the store's cache keeps the records
// until they expire. It returns how many agents were forgotten.
func (v *View) Prune(keep func(*record.Agent) bool) int {
	now := v.cfg.Now()
	n := 0
	v.mu.Lock()
	for _, s := range v.agents {
		if s.local || keep(&s.rec.Agent) {
			continue
		}
		v.delLocked(s)
		_ = v.proj.update(s.rec, nil, "", now)
		n++
	}
	for id, h := range v.pending {
		if !keep(&h.sa.Agent) {
			delete(v.pending, id)
		}
	}
	v.mu.Unlock()
	return n
}

// PeerUp tells the view that peer p was reached (a connection): what
// DropPeer said of it no longer holds. It returns the agents DropPeer
// removed of p (none once the mark expired): the node asks p for their
// heartbeats (a heartbeat pull), which brings them back from the cache
// now rather than at their next heartbeat on gossip.
func (v *View) PeerUp(p peer.ID) (dropped []string) {
	ps := p.String()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.down[ps]; ok {
		dropped = v.dropped[ps]
	}
	v.liveLocked(ps)
	return dropped
}

// liveLocked forgets that peer ps was found down, and the agents DropPeer
// removed of it.
func (v *View) liveLocked(ps string) {
	delete(v.down, ps)
	delete(v.dropped, ps)
}

// downLocked reports whether peer ps is marked down at now and since
// when; marks older than twice the liveness timeout are dropped (every
// neighbour has timed the agents out by then).
func (v *View) downLocked(ps string, now time.Time) (time.Time, bool) {
	t, ok := v.down[ps]
	if ok && now.Sub(t) > 2*v.cfg.Timeout {
		v.liveLocked(ps)
		return time.Time{}, false
	}
	return t, ok
}

// SetStatus records the status a remote agent reported on a transport
// other than gossip (a LAN heartbeat): it also counts as news that the
// agent is alive.
func (v *View) SetStatus(agentID string, st record.Status) {
	if !st.Valid() {
		return
	}
	now := v.cfg.Now()
	var events []Event
	v.mu.Lock()
	if s := v.agents[agentID]; s != nil && !s.local {
		before := v.effective(s)
		s.status, s.lastHeard, s.unhealthy = st, v.at(now), false
		if after := v.effective(s); after != before {
			events = append(events, v.agentEvent(EventStatus, s, now, ""))
			events = append(events, v.proj.setStatus(s.rec, after)...)
		}
	}
	v.mu.Unlock()
	v.emit(events)
}

// RemoveLocal removes a local registration (the node has already written
// the tombstone and published the unregister). When the agent was
// gossiped and others are quiet, one of them takes its place: promoted is
// its id, which the node must announce (its peers have never heard of it).
func (v *View) RemoveLocal(agentID string, reason record.UnregisterReason) (promoted string) {
	now := v.cfg.Now()
	var events []Event
	v.mu.Lock()
	s := v.agents[agentID]
	if s == nil || !s.local {
		v.mu.Unlock()
		return ""
	}
	v.delLocked(s)
	events = append(events, v.agentEvent(EventDeregistered, s, now, string(reason)))
	events = append(events, v.proj.update(s.rec, nil, "", now)...)
	if !s.quiet && v.quietN > 0 {
		// Under the same lock as the removal: a registration in between
		// would take the free place too. Any quiet agent will do; the
		// first the map yields is found at once when most hosted agents
		// are quiet (a registry), and a walk of the whole view happens
		// only when few are.
		for id, q := range v.agents {
			if q.local && q.quiet {
				q.quiet = false
				v.quietN--
				v.gossiped[id] = struct{}{}
				promoted = id
				break
			}
		}
	}
	v.mu.Unlock()
	v.emit(events)
	return promoted
}

func (v *View) unregister(agentID string, seq uint64, reason record.UnregisterReason, now time.Time) {
	ctx := v.storeCtx()
	if err := v.st.PutTombstone(ctx, store.Tombstone{AgentID: agentID, Seq: seq, Reason: reason, At: now}); err != nil {
		v.log.Warn("tombstone write failed", "agent_id", agentID, "err", err)
	}
	v.remove(agentID, string(reason), now)
}

func (v *View) remove(agentID, reason string, now time.Time) {
	var events []Event
	v.mu.Lock()
	s := v.agents[agentID]
	if s != nil {
		v.delLocked(s)
		events = append(events, v.agentEvent(EventDeregistered, s, now, reason))
		events = append(events, v.proj.update(s.rec, nil, "", now)...)
	}
	v.mu.Unlock()
	v.emit(events)
}

// ---- liveness clock ----

func (v *View) sweep() {
	now := v.cfg.Now()
	var events []Event
	var gone []string
	v.mu.Lock()
	expired := 0
	for id, p := range v.pending {
		if now.Sub(p.at) > v.cfg.Timeout {
			delete(v.pending, id)
			expired++
			v.ver.NoteRecord(p.sa, "view", ReasonUnvetted, fmt.Errorf("held %s for peer %s to be reached; it never was", v.cfg.Timeout, p.sa.Agent.PeerID))
		}
	}
	for p := range v.down {
		v.downLocked(p, now)
	}
	v.departed.prune(now)
	// By record.Status.Rank: a map assignment per agent cost a 100 000-agent
	// node 1 % of a core. Hosted agents never time out: counted, not walked.
	counts := v.localByStatus
	nowAt := v.at(now)
	var late map[string][]string
	for id, s := range v.remote {
		silent := time.Duration(nowAt - s.lastHeard)
		interval := v.judgedByLocked(s)
		if silent > v.TimeoutFor(interval) {
			v.delLocked(s)
			gone = append(gone, id)
			events = append(events, v.agentEvent(EventDeregistered, s, now, ReasonTimeout))
			events = append(events, v.proj.update(s.rec, nil, "", now)...)
			continue
		}
		if k := min(silent/interval, math.MaxUint8); k < LateAfter {
			s.lateAsked = 0 // heard again since
		} else if k > time.Duration(s.lateAsked) && v.cfg.Late != nil && !s.rec.Unbound() {
			s.lateAsked = uint8(k)
			if late == nil {
				late = map[string][]string{}
			}
			p := s.rec.Agent.PeerID
			late[p] = append(late[p], id)
		}
		if !s.unhealthy && silent > time.Duration(v.cfg.UnhealthyAfter)*interval {
			s.unhealthy = true
			events = append(events, v.agentEvent(EventStatus, s, now, ""))
			events = append(events, v.proj.setStatus(s.rec, record.StatusUnhealthy)...)
		}
		counts[v.effective(s).Rank()]++
	}
	v.mu.Unlock()
	if v.m != nil && expired > 0 {
		v.m.Rejects.WithLabelValues("view", string(ReasonUnvetted)).Add(float64(expired))
	}
	if v.m != nil {
		for _, st := range []record.Status{record.StatusHealthy, record.StatusDegraded, record.StatusUnhealthy, record.StatusMaintenance} {
			v.m.LiveAgents.WithLabelValues(string(st)).Set(float64(counts[st.Rank()]))
		}
	}
	// The cached record of an agent that left becomes stale at once.
	for _, id := range gone {
		v.touch(id, now)
	}
	v.emit(events)
	for p, ids := range late {
		v.cfg.Late(p, ids)
	}
}

// ---- reads ----

// Get returns the live agent with the given id.
func (v *View) Get(agentID string) (Agent, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.agents[agentID]
	if s == nil {
		return Agent{}, false
	}
	return v.snapshot(s), true
}

// Query returns the live agents matching m in the order of rank, at most
// limit (0 = all).
func (v *View) Query(m *store.Matcher, limit int) []Agent {
	f := m.Filter()
	// A text query is looked up in the text index first, without the
	// view's mutex; its hits are then read from the view (an agent that
	// changed in between is checked again by the matcher).
	var hits []textHit
	indexed, exact := false, false
	if f.AgentID == "" && f.Text != "" {
		hits, indexed, exact = v.proj.text.search(f.Text)
	}
	v.mu.Lock()
	out := make([]Agent, 0, len(hits))
	consider := func(s *agentState, score float64, textChecked bool) bool {
		if s == nil || !m.SourceAllowed(s.source) {
			return false
		}
		if textChecked && m.MatchesExceptText(&s.rec.Agent) || !textChecked && m.Matches(&s.rec.Agent) {
			a := v.snapshot(s)
			a.Relevance = score
			out = append(out, a)
			return true
		}
		return false
	}
	switch {
	case f.AgentID != "":
		consider(v.agents[f.AgentID], 0, false)
	case indexed && (f.Capability == "" || len(hits) <= len(v.proj.byCap[f.Capability])):
		// A limited answer reads the hits best score first and stops
		// once limit answers of the first rank class (hosted here,
		// HEALTHY, bound to a peer) score above every hit left: rankAgents
		// puts each of those before any hit left (a worse class, or the
		// same class and a lower score, so a later tier), so the answer's
		// first limit agents are among those read. A registry's queries
		// (its own healthy agents) then look up a few tiers of hits in
		// the view, not every record that has the word.
		early := limit > 0 && len(hits) > limit
		if early {
			slices.SortFunc(hits, func(a, b textHit) int { return cmp.Compare(b.score, a.score) })
		}
		first := 0 // answers of the first class among the hits read
		for i, h := range hits {
			if early && first >= limit && h.score < hits[i-1].score {
				break
			}
			// The text check is skipped only for the very record the
			// index matched (it applies record.MatchesText's rule), not
			// for one that replaced it since the search.
			s := v.agents[h.rec.Agent.AgentID]
			if consider(s, h.score, exact && s != nil && s.rec == h.rec) && s.local && v.effective(s).Rank() == 0 && !s.rec.Unbound() {
				first++
			}
		}
		// The whole query may be an agent id (record.MatchesText).
		if id := strings.TrimSpace(f.Text); v.agents[id] != nil {
			if !slices.ContainsFunc(hits, func(h textHit) bool { return h.rec.Agent.AgentID == id }) {
				consider(v.agents[id], idRelevance, false)
			}
		}
	case f.Capability != "":
		// The projection indexes agents by capability: only they can
		// match (the matcher checks the text; the index, when it
		// answered, gives the scores).
		var score map[string]float64
		if len(hits) > 0 {
			score = make(map[string]float64, len(hits))
			for _, h := range hits {
				score[h.rec.Agent.AgentID] = h.score
			}
		}
		for id := range v.proj.byCap[f.Capability] {
			consider(v.agents[id], score[id], false)
		}
	default:
		// Without an index answer (hits is nil here), no scores.
		for _, s := range v.agents {
			consider(s, 0, false)
		}
	}
	v.mu.Unlock()
	out = rankAgents(out, limit)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// idRelevance ranks a text query that names an agent id above any match
// of words.
const idRelevance = 1e6

// rankAgents orders query answers so that no peer's claims can crowd the others
// out of a limited answer (docs/protocol.md, "Ranking"): local agents
// first, then by status (HEALTHY, DEGRADED, MAINTENANCE, UNHEALTHY), records
// with peer binding before those without (record.SignedAgent.Unbound: no
// peer vouches that it hosts them), and within that round-robin across origin peers (the records' peer_id):
// each round takes one agent of every peer, peers with the longest history
// in this view first, each peer's agents oldest first. An agent's claims
// about itself (confidence_hint, its count of agents) play no part. With
// limit > 0 only the answer's first limit agents are sure to be in order
// (the tiers after them are left out).
func rankAgents(as []Agent, limit int) []Agent {
	slices.SortFunc(as, func(a, b Agent) int {
		if a.Local != b.Local {
			if a.Local {
				return -1
			}
			return 1
		}
		if r := a.Status.Rank() - b.Status.Rank(); r != 0 {
			return r
		}
		if a.Record.Unbound() != b.Record.Unbound() {
			if b.Record.Unbound() {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.Relevance, a.Relevance); c != 0 {
			return c
		}
		if c := a.FirstSeen.Compare(b.FirstSeen); c != 0 {
			return c
		}
		return compareStrings(a.Record.Agent.AgentID, b.Record.Agent.AgentID)
	})
	return roundRobin(as,
		func(a, b Agent) bool {
			return a.Local == b.Local && a.Status.Rank() == b.Status.Rank() && a.Record.Unbound() == b.Record.Unbound() && a.Relevance == b.Relevance
		},
		func(a Agent) string { return a.Record.Agent.PeerID }, limit)
}

// roundRobin reorders sorted items: within each tier (a run of items with
// sameTier), one item per peer per round, peers in the order of their
// first item and each peer's items in their order. With limit > 0 it
// returns the first limit items of that order only: a query answer needs
// no more, so it stops there and queues no more of a peer's items than
// could still be taken.
func roundRobin[T any](items []T, sameTier func(a, b T) bool, peerOf func(T) string, limit int) []T {
	n := len(items)
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]T, 0, n)
	var peers []string
	queues := map[string][]T{}
	for i := 0; i < len(items) && len(out) < n; {
		j := i
		for j < len(items) && sameTier(items[i], items[j]) {
			j++
		}
		if j-i == 1 {
			// A tier of one (text answers: most scores differ).
			out = append(out, items[i])
			i = j
			continue
		}
		need := n - len(out)
		peers = peers[:0]
		clear(queues)
		for _, it := range items[i:j] {
			p := peerOf(it)
			q, seen := queues[p]
			if !seen {
				peers = append(peers, p)
			}
			if len(q) < need {
				queues[p] = append(q, it)
			}
		}
		for len(peers) > 0 && len(out) < n {
			next := peers[:0]
			for _, p := range peers {
				if len(out) == n {
					break
				}
				q := queues[p]
				out = append(out, q[0])
				if queues[p] = q[1:]; len(q) > 1 {
					next = append(next, p)
				}
			}
			peers = next
		}
		i = j
	}
	return out
}

// Len returns the number of live agents.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.agents)
}

// Locals returns the records hosted by this node.
func (v *View) Locals() []*record.SignedAgent {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*record.SignedAgent
	for _, s := range v.agents {
		if s.local {
			out = append(out, s.rec)
		}
	}
	slices.SortFunc(out, func(a, b *record.SignedAgent) int { return compareStrings(a.Agent.AgentID, b.Agent.AgentID) })
	return out
}

// LocalsOffering returns the hosted records that offer the capability
// (from the projection's index) or, without one, the skill (a scan); at
// most limit (0: all), in agent id order when they are all returned.
func (v *View) LocalsOffering(skill, capability string, limit int) []*record.SignedAgent {
	v.mu.Lock()
	var out []*record.SignedAgent
	take := func(s *agentState) bool {
		if s != nil && s.local && s.rec.Agent.Offers(skill, capability) {
			out = append(out, s.rec)
		}
		return limit > 0 && len(out) >= limit
	}
	if capability != "" {
		for id := range v.proj.byCap[capability] {
			if take(v.agents[id]) {
				break
			}
		}
	} else {
		for _, s := range v.agents {
			if take(s) {
				break
			}
		}
	}
	v.mu.Unlock()
	slices.SortFunc(out, func(a, b *record.SignedAgent) int { return compareStrings(a.Agent.AgentID, b.Agent.AgentID) })
	return out
}

// DeferTextIndex stops the free-text index until ResumeTextIndex: for
// loading many records at once (a restart with 100 000 hosted records
// spent a third of its start indexing them). Text queries scan the view
// meanwhile, with the same answers.
func (v *View) DeferTextIndex() { v.proj.text.suspend() }

// ResumeTextIndex rebuilds the free-text index in the background from the
// records the view holds, and puts it back in service.
func (v *View) ResumeTextIndex() {
	ctx := v.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	v.textWG.Go(func() { v.rebuildText(ctx) })
}

func (v *View) rebuildText(ctx context.Context) {
	v.mu.Lock()
	recs := make([]*record.SignedAgent, 0, len(v.agents))
	for _, s := range v.agents {
		recs = append(recs, s.rec)
	}
	v.proj.text.track()
	v.mu.Unlock()
	fresh := newTextIndex()
	for i, sa := range recs {
		if i%1024 == 0 && ctx.Err() != nil {
			return
		}
		fresh.update(nil, sa)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.proj.text.resume(fresh, func(id string) *record.SignedAgent {
		if s := v.agents[id]; s != nil {
			return s.rec
		}
		return nil
	})
}

// LocalCount returns the number of hosted agents.
func (v *View) LocalCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, s := range v.agents {
		if s.local {
			n++
		}
	}
	return n
}

// HostedIDs returns the ids of the hosted agents that are quiet (quiet
// true) or gossiped (false), sorted.
func (v *View) HostedIDs(quiet bool) []string {
	v.mu.Lock()
	var out []string
	if quiet {
		out = make([]string, 0, v.quietN)
		for id, s := range v.agents {
			if s.local && s.quiet {
				out = append(out, id)
			}
		}
	} else {
		// Every heartbeat round (5 s): the at most MaxAgentsPerPeer ids,
		// not a walk of 100 000 hosted agents.
		out = make([]string, 0, len(v.gossiped))
		for id := range v.gossiped {
			out = append(out, id)
		}
	}
	v.mu.Unlock()
	slices.Sort(out)
	return out
}

// Quiet reports whether agentID is hosted here and quiet: not gossiped,
// as this node gossips MaxAgentsPerPeer of its hosted agents at most.
func (v *View) Quiet(agentID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.agents[agentID]
	return s != nil && s.local && s.quiet
}

// QuietCount returns the number of quiet hosted agents (Agent.Quiet).
func (v *View) QuietCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.quietN
}

// Beating returns the number of live agents that beat on gossip: the
// remote ones and the hosted ones that are not quiet. The heartbeat
// budget is shared among them.
func (v *View) Beating() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.agents) - v.quietN
}

// CountByPeer returns the number of remote agents of peer p in the live
// view (healthy or not): what the per-peer quota counts.
func (v *View) CountByPeer(p peer.ID) int {
	return v.CountByPeerString(p.String())
}

// CountByPeerString is CountByPeer of a peer id in its text form (saving
// its base58 encoding to a caller that keeps it).
func (v *View) CountByPeerString(p string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.perPeer[p]
}

// ByPeer returns the live records hosted by peer p (for the DHT's "live in
// the local view" shortcut).
func (v *View) ByPeer(p peer.ID) []*record.SignedAgent {
	ps := p.String()
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*record.SignedAgent
	for _, s := range v.agents {
		if s.rec.Agent.PeerID == ps && !s.unhealthy {
			out = append(out, s.rec)
		}
	}
	return out
}

// snapshot copies an agent's state out (v.mu held). Its Interval is the
// one the liveness clock judges it by, so Deadlines agrees with sweep.
func (v *View) snapshot(s *agentState) Agent {
	return Agent{Record: s.rec, Source: s.source, Local: s.local, Quiet: s.quiet, FirstSeen: v.time(s.firstSeen),
		LastHeard: v.time(s.lastHeard), Status: v.effective(s), Interval: v.judgedByLocked(s)}
}

// judgedByLocked is the interval the liveness clock judges an agent by
// (v.mu held): its own last claim, or its peer's when that is longer (see
// peerInterval), and never less than the base interval.
func (v *View) judgedByLocked(s *agentState) time.Duration {
	return max(s.interval, v.cfg.HeartbeatInterval, v.peerInterval[s.rec.Agent.PeerID])
}

// effective is the agent status used for routing.
func (v *View) effective(s *agentState) record.Status {
	if s.unhealthy {
		return record.StatusUnhealthy
	}
	if s.status != "" {
		return s.status
	}
	return record.StatusHealthy
}

// TimeoutFor is how long an agent beating every interval stays in the
// view without news: Config.Timeout, scaled up for agents that announced a
// longer interval than the default.
func (v *View) TimeoutFor(interval time.Duration) time.Duration {
	interval = max(interval, v.cfg.HeartbeatInterval)
	timeout := v.cfg.Timeout
	if scaled := time.Duration(float64(v.cfg.Timeout) * float64(interval) / float64(v.cfg.HeartbeatInterval)); scaled > timeout {
		timeout = scaled
	}
	return timeout
}

// Deadlines says when the liveness rules act on a remote agent if nothing
// more is heard of it: when it is marked UNHEALTHY and when it is removed.
func (v *View) Deadlines(a Agent) (unhealthy, removed time.Time) {
	interval := max(a.Interval, v.cfg.HeartbeatInterval)
	return a.LastHeard.Add(time.Duration(v.cfg.UnhealthyAfter) * interval), a.LastHeard.Add(v.TimeoutFor(interval))
}

// reviveLocked clears the UNHEALTHY mark when news arrives.
func (v *View) reviveLocked(s *agentState, now time.Time, events []Event) []Event {
	if !s.unhealthy {
		return events
	}
	s.unhealthy = false
	events = append(events, v.agentEvent(EventStatus, s, now, ""))
	return append(events, v.proj.setStatus(s.rec, v.effective(s))...)
}

func (v *View) agentEvent(t EventType, s *agentState, now time.Time, reason string) Event {
	return Event{
		Type: t, Time: now, AgentID: s.rec.Agent.AgentID, PeerID: s.rec.Agent.PeerID,
		Status: v.effective(s), Reason: reason, Capabilities: s.rec.Agent.AllCapabilities(),
		Source: s.source, Record: s.rec,
	}
}

func (v *View) emit(events []Event) {
	for _, e := range events {
		if e.Type == EventDeregistered {
			v.ver.Journal().NoteLeft(e.AgentID, e.Time, e.Reason)
		}
		v.hub.publish(e)
	}
}

func (v *View) putStore(sa *record.SignedAgent, src store.Source, now time.Time) error {
	return v.st.Put(v.storeCtx(), store.Entry{Record: sa, Source: src, ReceivedAt: now, ExpiresAt: v.freshUntil(sa, now)})
}

// freshUntil is how long a cached record stays fresh: the cache TTL, never
// past the record's own expiry.
func (v *View) freshUntil(sa *record.SignedAgent, now time.Time) time.Time {
	t := now.Add(v.cfg.CacheTTL)
	if exp := sa.Agent.ExpiresAt(); exp.Before(t) {
		return exp
	}
	return t
}

func sameCapabilities(a, b *record.Agent) bool {
	return slices.Equal(a.AllCapabilities(), b.AllCapabilities())
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
