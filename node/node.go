// Package node composes agentd: it builds the parts in New (host, store,
// verifier, live view, DHT, gossip, LAN, catalog), owns their lifecycles,
// tears them down in reverse order in Close, and delegates behaviour to
// them. Two pieces of behaviour live here because they span transports: the
// lifecycle of the agents this node hosts (register → provide → heartbeat
// → re-announce; unregister → tombstone → stop), and the resolver that
// answers a query through the fallback chain of the map (local view, LAN,
// DHT, SkillCenter, stale cache).
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/liveness"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// LAN is zero-configuration LAN discovery (package lan implements it).
// The node owns its lifecycle once passed in Options: it starts it after
// the transports and closes it before them, and tells it when hosted
// agents change.
type LAN interface {
	Start(ctx context.Context) error
	Close() error
	// Discover asks the LAN for agents matching f, waiting at most until
	// ctx is done. signed are agentd records verified through the trust
	// Verifier; foreign are seed-001 skills of other implementations,
	// authenticated by the shared HMAC key (seed 001 §10.1), which carry
	// no agent signature.
	Discover(ctx context.Context, f store.Filter) (signed []*record.SignedAgent, foreign []*record.Agent, err error)
	// Available reports whether LAN discovery currently works, and why not.
	Available() (bool, string)
	// Refresh re-advertises the hosted records (they changed).
	Refresh()
	// Unregister announces that a hosted agent leaves.
	Unregister(ctx context.Context, agentID string, reason record.UnregisterReason)
	// SetStatus announces a hosted agent's status.
	SetStatus(agentID string, st record.Status)
}

// Catalog is the SkillCenter fallback step; *skillcenter.Client
// implements it. Resolve answers f from the catalog: fresh matches, or,
// when the catalog cannot be asked, the matching entries of its cache
// marked Stale; an error only when it has neither. Catalog entries carry
// no signature (Result.Record stays nil).
type Catalog interface {
	Resolve(ctx context.Context, f store.Filter) ([]skillcenter.Match, error)
}

var _ Catalog = (*skillcenter.Client)(nil)

// Options carry the parts a caller may inject.
type Options struct {
	// Identity is required.
	Identity *trust.Identity
	// Host, if nil, is built with p2p.New from Config.Listen. A host
	// passed in is not closed by the node.
	Host host.Host
	// Store, if nil, is an in-memory store owned by the node. A store
	// passed in is not closed by the node.
	Store store.Store
	// LAN and Catalog are optional resolver steps.
	LAN     LAN
	Catalog Catalog
	// Chain is the certificate trust store for the verifier (optional).
	Chain trust.ChainVerifier
	// Metrics may be nil (a private registry is created).
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Node is one agentd.
type Node struct {
	cfg Config
	id  *trust.Identity
	// peerID is id.PeerID's text, encoded once: every heartbeat carries it.
	peerID string
	host   host.Host
	st     store.Store
	ver    *trust.Verifier
	jrnl   *journal.Journal // what was heard of each agent and decided (Explain)
	view   *view.View
	dht    *dht.DHT
	book   *bootstrap.Book
	gsp    *gossip.Gossip
	vet    *vetter
	vetN   *network.NotifyBundle
	det    *liveness.Detector // nil when DisableSuspicion
	pl     *pulls             // heartbeat pulls of late agents (pull.go)
	vc     viewConns          // view peers protected from trimming (tagViewPeers)
	lan    LAN
	cat    Catalog
	m      *metrics.Metrics
	log    *slog.Logger

	ownHost, ownStore bool

	in            *interest
	interestMu    sync.Mutex // serializes syncInterest
	interestDirty atomic.Bool

	mu    sync.Mutex
	stale map[string]struct{}   // hosted agents to sign again in their next heartbeat slot (pace.go)
	memo  map[string]hostedMemo // hosted agent → its record's shards and validity (applyHosted)
	// lastBeats is the newest heartbeat or status published per hosted
	// agent, the answer to heartbeat pulls (pull.go): only gossiped agents
	// beat, so at most MaxAgentsPerPeer entries, not one per hosted agent.
	lastBeats map[string]record.Beat
	// loud holds the gossiped agents whose next heartbeat goes on gossip
	// whatever the round (quiet): the first after a status, which repeats
	// what a peer may have missed in a race (a status that overtook the
	// announcement it depends on). An agent's first heartbeat since it is
	// hosted is loud too: it has no lastBeats entry yet.
	loud map[string]struct{}
	// wanted holds the gossiped agents a peer asked to hear on gossip
	// (beat requests, pull.go), until when: their heartbeats keep the
	// 1-in-GossipBeatEvery round on topics where every peer could ask.
	// At most one entry per gossiped agent.
	wanted map[string]time.Time
	// asked is, per host whose pull failed, when the last one failed and
	// when this node last asked it for heartbeats on gossip (at most
	// maxAsked hosts).
	asked map[peer.ID]askState
	// requests: this node asks hosts it cannot pull (it lists
	// gossip.WantedProtocol).
	requests bool
	// hostedShardCount counts, per shard, the hosted agents with a
	// capability in it (applyHosted, dropHosted): the hosted part of the
	// interest, read without walking every hosted record.
	hostedShardCount map[string]int
	agentMu          agentLocks
	// lastSeq is the highest seq used per agent that has no memo: not
	// yet taken by the view, or no longer hosted (a hosted agent's is in
	// its memo: one map entry per hosted agent, not two).
	lastSeq  map[string]uint64
	fetches  map[string]time.Time
	fetchSem chan struct{}
	leases   map[string]time.Time // hosted registrations that expire
	// repub holds the hosted agents to announce again for topics that
	// gained their first peer; republishLoop takes them after repubWake.
	repub     map[string]struct{}
	repubWake chan struct{}

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	closed  bool
	startAt time.Time
	reach   *p2p.Reachability // AutoNAT's verdict; nil until Start
}

// New builds a node without starting it.
func New(cfg Config, opts Options) (n *Node, err error) {
	cfg.defaults()
	if opts.Identity == nil {
		return nil, errors.New("node: an identity is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := opts.Metrics
	if m == nil {
		m = metrics.New(false)
	}
	n = &Node{
		cfg: cfg, id: opts.Identity, peerID: opts.Identity.PeerID.String(), host: opts.Host, st: opts.Store, lan: opts.LAN, cat: opts.Catalog,
		m: m, log: log, lastSeq: map[string]uint64{}, stale: map[string]struct{}{}, memo: map[string]hostedMemo{}, lastBeats: map[string]record.Beat{}, loud: map[string]struct{}{}, wanted: map[string]time.Time{}, asked: map[peer.ID]askState{}, hostedShardCount: map[string]int{}, fetches: map[string]time.Time{}, leases: map[string]time.Time{},
		repub: map[string]struct{}{}, repubWake: make(chan struct{}, 1),
		fetchSem: make(chan struct{}, cfg.UnknownFetchConcurrency),
		in:       newInterest(),
		vc:       viewConns{seed: maphash.MakeSeed()},
	}
	switch cfg.Scope {
	case ScopeInterest, ScopeFull:
	default:
		return nil, fmt.Errorf("node: scope %q is not %q or %q", cfg.Scope, ScopeInterest, ScopeFull)
	}
	defer func() {
		if err != nil {
			_ = n.closeParts() // err says why New failed; closing is best effort
		}
	}()
	if n.st == nil {
		n.st, err = store.Open(store.Options{CacheTTL: cfg.CacheTTL})
		if err != nil {
			return nil, fmt.Errorf("open in-memory store: %w", err)
		}
		n.ownStore = true
	}
	tc := cfg.Trust
	if opts.Chain != nil {
		tc.Chain = opts.Chain
	}
	n.jrnl = journal.New(0)
	tc.Journal = n.jrnl
	n.ver, err = trust.NewVerifier(tc, n.st)
	if err != nil {
		return nil, err
	}
	if n.host == nil {
		n.host, err = p2p.New(p2p.Config{Key: opts.Identity.PeerKey, Listen: cfg.Listen, UserAgent: "agentd/" + record.ProtocolVersion})
		if err != nil {
			return nil, err
		}
		n.ownHost = true
	}
	if n.host.ID() != opts.Identity.PeerID {
		return nil, fmt.Errorf("node: host id %s is not the identity's peer id %s", n.host.ID(), opts.Identity.PeerID)
	}
	n.vet = newVetter(n)
	n.vetN = &network.NotifyBundle{ConnectedF: n.vet.connected}
	n.pl = newPulls()
	var late func(string, []string)
	if !cfg.DisableGossip && !cfg.legacy {
		late = n.pl.late
	}
	n.view = view.New(view.Config{
		HeartbeatInterval: cfg.HeartbeatInterval, UnhealthyAfter: cfg.UnhealthyAfter,
		Timeout: cfg.Timeout, CacheTTL: cfg.CacheTTL,
		MaxAgentsPerPeer: cfg.MaxAgentsPerPeer,
		MaxInterval:      n.maxClaimedInterval,
		Vetted:           n.vet.vetted, RequestVet: n.vet.request, PrefixOf: n.vet.prefixOf,
		Late: late,
	}, n.st, n.ver, m, log)
	n.view.OnUnknownAgent(n.fetchUnknown)
	n.st.OnRefresh(n.refreshEntry)
	if !cfg.DisableDHT {
		dc := cfg.DHT
		dc.BootstrapPeers = append(dc.BootstrapPeers, cfg.Bootstrap...)
		dc.Live = n.view.ByPeer
		if dc.OwnAgentID == "" {
			dc.OwnAgentID = opts.Identity.AgentID
		}
		n.dht, err = dht.New(n.host, dc, n.ver, hosted{n}, m, log)
		if err != nil {
			return nil, fmt.Errorf("dht: %w", err)
		}
		n.book, err = bootstrap.NewBook(n.host, n.st, bootstrap.BookConfig{}, log)
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// SetLAN attaches LAN discovery after New and before Start (LAN needs
// the node's verifier and view, so it is built after the node).
func (n *Node) SetLAN(l LAN) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return errors.New("node: SetLAN after Start")
	}
	n.lan = l
	return nil
}

// Start starts the parts: the live view's clock, the DHT, gossip, the
// loops of the hosted agents; then it joins the network through the
// bootstrap peers and the address book, and asks neighbours for their live
// view. Joining is best effort: a node with no reachable peer keeps
// running (LAN discovery or a later bootstrap may connect it).
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.started || n.closed {
		n.mu.Unlock()
		return errors.New("node: already started or closed")
	}
	n.started = true
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.startAt = time.Now()
	n.mu.Unlock()

	n.view.Start(n.ctx)
	n.host.Network().Notify(n.vetN)
	n.vet.run(n.ctx, &n.wg)
	// Gossip first: its protocols must be registered before the DHT and
	// the address book dial anyone, or the first peers identify this node
	// without GossipSub and learn it only from identify's push, a round
	// trip after this node's subscriptions reached them — a window in which
	// their publishes to it are dropped ("no send queue").
	if !n.cfg.DisableGossip {
		gc := gossip.DefaultConfig()
		if n.cfg.Gossip != nil {
			gc = *n.cfg.Gossip
		}
		gc.Scoped = n.cfg.Scope == ScopeInterest && !n.cfg.legacy
		if n.cfg.legacy || gc.DisableBatches {
			// Protocol v1.0 and v1.1 had no resent announcements.
			gc.DisableResends = true
		}
		gc.DisableSyncTrail = !n.cfg.TrailingSyncs()
		if !n.cfg.legacy && !gc.DisableBatches {
			// A node that does not read heartbeat batches models protocol
			// v1.0 (gossip.Config.DisableBatches), which had no pulls either.
			gc.LatestBeats = n.latestBeats
			if !n.cfg.DisableBeatRequests {
				gc.OnWanted = n.onWanted
				n.requests = true
			}
		}
		g, err := gossip.New(n.ctx, n.host, gc, n.ver, gossipSink{n.view, n.vet, n.heartbeatInterval}, n.m, n.log)
		if err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
		n.gsp = g
		g.OnTopicPeers(n.republishLocals)
		if err := g.Start(n.ctx); err != nil {
			return fmt.Errorf("start gossip: %w", err)
		}
		if n.cfg.legacy {
			n.host.RemoveStreamHandler(gossip.ScopedSyncProtocol)
			n.host.RemoveStreamHandler(gossip.TrailSyncProtocol)
		}
	}
	if n.dht != nil {
		if err := n.dht.Start(n.ctx); err != nil {
			return fmt.Errorf("start dht: %w", err)
		}
		if err := n.book.Start(); err != nil {
			return fmt.Errorf("start address book: %w", err)
		}
	}
	if !n.cfg.DisableSuspicion {
		hooks := liveness.Hooks{
			Holds: func(p peer.ID) bool { return n.view.CountByPeer(p) > 0 },
			Down:  n.peerDown,
		}
		if n.gsp != nil {
			hooks.Publish = n.gsp.PublishLiveness
		}
		n.det = liveness.New(n.host, n.cfg.Liveness, hooks, n.m, n.log)
		if n.gsp != nil {
			if err := n.gsp.JoinLiveness(n.det.ValidateClaim); err != nil {
				return fmt.Errorf("join liveness topic: %w", err)
			}
		}
		n.det.Start(n.ctx)
	}
	if n.lan != nil {
		if err := n.lan.Start(n.ctx); err != nil {
			return fmt.Errorf("start lan: %w", err)
		}
	}
	// Restore the registrations this node hosted before a restart. The
	// free-text index is built afterwards, in the background (text
	// queries scan until then).
	var ids []string
	loadStart := time.Now()
	n.view.DeferTextIndex()
	err := n.st.EachLocal(ctx, func(sa *record.SignedAgent) {
		n.noteSeq(sa.Agent.AgentID, sa.Agent.Seq)
		n.view.ApplyLocal(sa)
		ids = append(ids, sa.Agent.AgentID)
	})
	loaded := time.Since(loadStart)
	if err != nil {
		n.view.ResumeTextIndex()
		return fmt.Errorf("load local registrations: %w", err)
	}
	// Joining the shards of what it hosts (one topic and one rendezvous
	// key each, 0.1 s for 100 000 hosted records over 200 capabilities)
	// and handing the records to the DHT (0.12 s) need not hold up the
	// API: until they are joined nobody hears the heartbeats it would
	// send, and none is sent; the DHT provides in its own loop.
	n.wg.Go(func() {
		// Each restored record's shards are counted here, off the start:
		// under the agent's lock, from the record hosted now, so that a
		// registration or an unregistration meanwhile is counted (and
		// provided, or no longer) once.
		for _, id := range ids {
			if n.ctx.Err() != nil {
				return
			}
			unlock := n.lockAgent(id)
			if sa, ok := n.hostedRecord(id); ok {
				n.applyHosted(sa) // compact already (EachLocal)
				if n.dht != nil {
					n.dht.Provide(sa)
				}
			}
			unlock()
		}
		n.syncInterest()
	})
	if err := n.restoreStatuses(ctx); err != nil {
		return fmt.Errorf("load statuses: %w", err)
	}
	// Re-sign with a fresh seq and issued_at so peers that saw the old
	// record (or its tombstone) take the new one, then say again what
	// status each agent last reported — in the background, each in its
	// heartbeat slot (pace.go): the API serves the stored records
	// meanwhile, and a restart with 100 000 hosted agents does not wait
	// for 100 000 signatures and disk writes.
	n.markStale(ids...)
	if err := n.restoreLeases(ctx); err != nil {
		return fmt.Errorf("load leases: %w", err)
	}
	// The free-text index is built once the rest of the start is done:
	// it would take the cores the start waits for.
	n.view.ResumeTextIndex()
	if len(ids) > 0 {
		n.log.Info("hosted registrations restored", "agents", len(ids), "decoded_in", loaded.Round(time.Millisecond), "took", time.Since(loadStart).Round(time.Millisecond))
	}
	n.wg.Go(n.heartbeatLoop)
	if n.gsp != nil && !n.cfg.legacy {
		for range pullWorkers {
			n.wg.Go(n.pullLoop)
		}
	}
	n.wg.Go(n.republishLoop)
	n.wg.Go(n.quietLoop)
	n.wg.Go(n.joinLoop)
	if n.reach, err = p2p.WatchReachability(n.host, "agentd node reachability", func(r network.Reachability) {
		n.log.Info("reachability", "reachability", strings.ToLower(r.String()))
	}); err != nil {
		return fmt.Errorf("follow reachability: %w", err)
	}
	n.every(n.cfg.LeaseCheckInterval, n.expireLeases)
	n.every(2*time.Second, n.updateGauges)
	n.every(viewTagInterval, n.tagViewPeers)
	if n.gsp != nil {
		n.every(n.cfg.InterestCheck, n.interestTick)
	}
	return nil
}

// Shutdown leaves gracefully: every hosted agent some peer listens for is
// unregistered with reason SHUTDOWN (published, so peers drop it at once)
// while half of ctx's time lasts, but its local registration is kept, so
// a restart announces it again. Then the node closes.
func (n *Node) Shutdown(ctx context.Context) error {
	locals := n.view.Locals()
	// Unregister every hosted agent some peer listens for, within half of
	// the time ctx leaves (the rest is for closing). A node hosting many
	// thousands cannot say them all in time: the peers drop the rest when
	// they find this node gone (early failure detection: one claim for all
	// of its agents), or at the heartbeat timeout.
	var stop time.Time
	if dl, ok := ctx.Deadline(); ok {
		stop = time.Now().Add(time.Until(dl) / 2)
	}
	said, left := 0, 0
	for i, sa := range locals {
		if !stop.IsZero() && time.Now().After(stop) || ctx.Err() != nil {
			left = len(locals) - i
			break
		}
		if n.gsp == nil || !n.gsp.Listened(n.shardsOf(sa)...) {
			continue // nobody would hear it
		}
		if err := n.publishUnregister(ctx, sa.Agent.AgentID, record.ReasonShutdown); err != nil {
			n.log.Warn("unregister on shutdown failed", "agent_id", sa.Agent.AgentID, "err", err)
			continue
		}
		said++
	}
	if left > 0 {
		n.log.Warn("shutdown: not every hosted agent was unregistered in time; peers drop the rest when they find this node gone",
			"unregistered", said, "left", left)
	}
	if said > 0 && len(n.host.Network().Peers()) > 0 {
		t := time.NewTimer(n.cfg.ShutdownGrace)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return n.Close()
}

// Close stops everything without telling peers (a crash looks the same to
// them). It is idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	cancel := n.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.host.Network().StopNotify(n.vetN)
	n.wg.Wait()
	return n.closeParts()
}

// closeParts tears down in reverse order of construction.
func (n *Node) closeParts() error {
	var errs []error
	if n.reach != nil {
		errs = append(errs, n.reach.Close())
	}
	if n.lan != nil && n.started {
		errs = append(errs, n.lan.Close())
	}
	if n.det != nil {
		errs = append(errs, n.det.Close())
	}
	if n.gsp != nil {
		errs = append(errs, n.gsp.Close())
	}
	if n.book != nil {
		errs = append(errs, n.book.Close())
	}
	if n.dht != nil {
		errs = append(errs, n.dht.Close())
	}
	if n.view != nil {
		errs = append(errs, n.view.Close())
	}
	if n.ownHost && n.host != nil {
		errs = append(errs, n.host.Close())
	}
	if n.ownStore && n.st != nil {
		errs = append(errs, n.st.Close())
	}
	return errors.Join(errs...)
}

// ---- accessors ----

// Host returns the libp2p host.
func (n *Node) Host() host.Host { return n.host }

// Identity returns the node's identity.
func (n *Node) Identity() *trust.Identity { return n.id }

// Store returns the node's store.
func (n *Node) Store() store.Store { return n.st }

// View returns the live view.
func (n *Node) View() *view.View { return n.view }

// Verifier returns the trust verifier.
func (n *Node) Verifier() *trust.Verifier { return n.ver }

// Metrics returns the node's metrics.
func (n *Node) Metrics() *metrics.Metrics { return n.m }

// DHT returns the DHT, or nil when disabled.
func (n *Node) DHT() *dht.DHT { return n.dht }

// Gossip returns the gossip transport, or nil before Start or when disabled.
func (n *Node) Gossip() *gossip.Gossip { return n.gsp }

// Lookup returns the ranked providers of a capability.
func (n *Node) Lookup(capability string) []view.Provider { return n.view.Lookup(capability) }

// Capabilities returns the capability projection.
func (n *Node) Capabilities() map[string][]view.Provider { return n.view.Capabilities() }

// RequestScene resolves a scene request (seed 001 §4) from the live view.
func (n *Node) RequestScene(scene string, caps []string) (view.SceneJoin, error) {
	return n.view.RequestScene(scene, caps)
}

// JoinScene subscribes to a scene topic.
func (n *Node) JoinScene(name string) error {
	if n.gsp == nil {
		return errors.New("gossip is not running")
	}
	return n.gsp.JoinScene(name)
}

// LeaveScene unsubscribes from a scene topic.
func (n *Node) LeaveScene(name string) error {
	if n.gsp == nil {
		return errors.New("gossip is not running")
	}
	return n.gsp.LeaveScene(name)
}

// PeerInfo describes a connected peer.
type PeerInfo struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	Direction string   `json:"direction"`
	// Connection is "direct" when at least one connection to the peer is
	// direct, "relayed" when every one goes through a circuit v2 relay.
	Connection string        `json:"connection"`
	Latency    time.Duration `json:"latency_ns"`
	Agents     []string      `json:"agents,omitempty"` // live agents hosted by the peer
	// Protocols are the protocols the peer said it speaks (identify),
	// sorted.
	Protocols []string `json:"protocols,omitempty"`
}

// Peers lists connected peers.
func (n *Node) Peers() []PeerInfo {
	var out []PeerInfo
	for _, p := range n.host.Network().Peers() {
		pi := PeerInfo{ID: p.String(), Latency: n.host.Peerstore().LatencyEWMA(p)}
		for _, c := range n.host.Network().ConnsToPeer(p) {
			pi.Addrs = append(pi.Addrs, c.RemoteMultiaddr().String())
			if c.Stat().Direction == network.DirInbound {
				pi.Direction = "inbound"
			} else {
				pi.Direction = "outbound"
			}
			if !p2p.Relayed(c) {
				pi.Connection = "direct"
			} else if pi.Connection == "" {
				pi.Connection = "relayed"
			}
		}
		for _, sa := range n.view.ByPeer(p) {
			pi.Agents = append(pi.Agents, sa.Agent.AgentID)
		}
		if ps, err := n.host.Peerstore().GetProtocols(p); err == nil {
			for _, id := range ps {
				pi.Protocols = append(pi.Protocols, string(id))
			}
			slices.Sort(pi.Protocols)
		}
		out = append(out, pi)
	}
	return out
}

// Reachability is AutoNAT's verdict on the node: "unknown", "public" or
// "private".
func (n *Node) Reachability() string {
	if n.reach == nil {
		return "unknown"
	}
	return n.reach.String()
}

// Health summarises the node for /healthz and /readyz.
type Health struct {
	AgentID    string            `json:"agent_id"`
	PeerID     string            `json:"peer_id"`
	Addrs      []string          `json:"addrs"`
	Peers      int               `json:"peers"`
	LiveAgents int               `json:"live_agents"`
	Cached     int               `json:"cached_records"`
	Uptime     string            `json:"uptime"`
	DHTTable   int               `json:"dht_routing_table"`
	Transports map[string]string `json:"transports"` // name → "ok" | "off" | "unavailable: why"
	// Reachability is AutoNAT's verdict: "unknown", "public" or "private".
	Reachability string `json:"reachability"`
	// DHTMode is "server", "client" or "off".
	DHTMode string `json:"dht_mode"`
	// Hosted is the number of agents this node hosts; Resigning how many
	// of them wait to be signed and announced again (after a restart).
	Hosted    int `json:"hosted_agents"`
	Resigning int `json:"resigning"`
	// Quiet is how many hosted agents are beyond the most this node
	// gossips (Config.MaxAgentsPerPeer, what each peer admits of one
	// peer): found through the DHT and the LAN only.
	Quiet int `json:"quiet_agents"`
}

// Health reports the node's state.
func (n *Node) Health() Health {
	h := Health{
		AgentID: n.id.AgentID, PeerID: n.id.PeerID.String(),
		Peers: len(n.host.Network().Peers()), LiveAgents: n.view.Len(), Cached: n.st.Len(),
		Transports: map[string]string{}, Hosted: n.view.LocalCount(), Resigning: n.Resigning(), Quiet: n.view.QuietCount(),
	}
	for _, a := range n.host.Addrs() {
		h.Addrs = append(h.Addrs, a.String()+"/p2p/"+n.host.ID().String())
	}
	if !n.startAt.IsZero() {
		h.Uptime = time.Since(n.startAt).Round(time.Second).String()
	}
	h.Reachability = n.Reachability()
	h.DHTMode = "off"
	if n.dht != nil {
		h.DHTTable = n.dht.RoutingTableSize()
		h.Transports["dht"] = "ok"
		h.DHTMode = "server"
		if n.dht.Status().ClientMode {
			h.DHTMode = "client"
		}
	} else {
		h.Transports["dht"] = "off"
	}
	if n.gsp != nil {
		h.Transports["gossip"] = "ok"
	} else {
		h.Transports["gossip"] = "off"
	}
	if n.lan == nil {
		h.Transports["lan"] = "off"
	} else if ok, why := n.lan.Available(); ok {
		h.Transports["lan"] = "ok"
	} else {
		h.Transports["lan"] = "unavailable: " + why
	}
	switch c := n.cat.(type) {
	case nil:
		h.Transports["skillcenter"] = "off"
	case interface{ State() skillcenter.State }:
		if st := c.State(); st.Circuit == "closed" {
			h.Transports["skillcenter"] = "ok"
		} else {
			h.Transports["skillcenter"] = fmt.Sprintf("unavailable: circuit %s after %d failures", st.Circuit, st.Failures)
		}
	default:
		h.Transports["skillcenter"] = "ok"
	}
	return h
}

// ---- background loops ----

// joinLoop connects to the bootstrap peers and the address book, then asks
// neighbours for their live view; it retries with backoff while the node
// has no peer.
func (n *Node) joinLoop() {
	retry := backoff.Backoff{Base: time.Second, Max: 30 * time.Second}
	synced := false
	boot := n.cfg.Bootstrap
	for attempt := 0; ; attempt++ {
		if len(n.host.Network().Peers()) == 0 {
			if n.cfg.ResolveBootstrap != nil && attempt > 0 {
				if peers := n.cfg.ResolveBootstrap(n.ctx); len(peers) > 0 {
					boot = peers
				}
			}
			if n.dht != nil {
				if err := bootstrap.Join(n.ctx, n.dht, boot, n.book); err != nil {
					n.log.Debug("bootstrap attempt failed", "err", err)
				}
			} else {
				for _, p := range boot {
					cctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
					_ = n.host.Connect(cctx, p)
					cancel()
				}
			}
		}
		if !synced && n.gsp != nil && len(n.host.Network().Peers()) > 0 {
			cnt, err := n.gsp.Sync(n.ctx)
			if err == nil {
				synced = true
				n.log.Info("joined", "peers", len(n.host.Network().Peers()), "synced_records", cnt)
			}
		}
		wait := 30 * time.Second
		if len(n.host.Network().Peers()) == 0 || !synced {
			wait = retry.Next()
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (n *Node) updateGauges() {
	n.m.Peers.Set(float64(len(n.host.Network().Peers())))
	n.m.Records.WithLabelValues("cached").Set(float64(n.st.Len()))
}

// Connections to the peers whose agents are in the live view are kept:
// a closed connection to such a peer is what early failure detection
// listens for (package liveness), and one the connection manager closed
// would make the detector ping the peer, which dials it again. The first
// viewProtectMax of them — ordered by a hash of the peer id keyed with a
// secret of this node, so the set is stable between passes and a peer
// cannot grind an id that sorts first everywhere — are protected from trimming; the rest carry a tag that makes a
// trim close other connections first (lookups' leftovers). A node's view
// follows its interest, so this follows it too. For comparison, GossipSub
// v0.17 protects its mesh peers (tag_tracer.go, despite its doc comment
// speaking of a tag of 20) and kad-dht v0.42 protects the peers of its
// routing table's first two buckets and tags the others with 5.
//
// The pass runs every viewTagInterval, inside the connection manager's
// grace period (p2p.DefaultConnGrace, 3 s), so a new view peer is marked
// before its connection can be trimmed. A pass over a node's ~100–200
// connections is a sort and a map lookup each.
const (
	// ViewTag is the connection manager tag (and protection) of view peers.
	ViewTag         = "agentd-view"
	viewTagWeight   = 20
	viewTagInterval = time.Second
	viewProtectMax  = 64
)

// viewConns is what tagViewPeers protected, so that a peer leaves the
// connection manager's protected set when it leaves the view or
// disconnects (the manager keeps protections of disconnected peers).
type viewConns struct {
	mu        sync.Mutex
	seed      maphash.Seed // keys the order of view peers (set in New)
	protected map[peer.ID]struct{}
	// tagged are the peers tagged (not protected) at the last pass. A
	// pass calls the manager only for what changed, and TagPeer for every
	// tagged peer (the manager drops a peer's tags when it disconnects):
	// protecting and untagging every view peer every second was a third
	// of the pass.
	tagged map[peer.ID]struct{}
	// names holds the text form of the peers connected at the last pass:
	// a peer id's base58 encoding, once per pass and peer, was half of
	// this pass's CPU.
	names map[peer.ID]string
}

// tagViewPeers protects, tags or releases every connected peer by whether
// the view holds its agents. Releases go first: a peer protected before
// and only tagged now loses the protection and gets the tag.
func (n *Node) tagViewPeers() {
	cm := n.host.ConnManager()
	n.vc.mu.Lock()
	defer n.vc.mu.Unlock()
	connected := n.host.Network().Peers()
	names := make(map[peer.ID]string, len(connected))
	for _, p := range connected {
		s, ok := n.vc.names[p]
		if !ok {
			s = p.String()
		}
		names[p] = s
	}
	n.vc.names = names
	protect, tag, release := planViewConns(connected, func(p peer.ID) bool { return n.view.CountByPeerString(names[p]) > 0 },
		func(p peer.ID) uint64 { return maphash.String(n.vc.seed, string(p)) }, n.vc.protected, viewProtectMax)
	n.vc.apply(cm, protect, tag, release)
}

// apply tells the connection manager a pass's plan (planViewConns),
// calling it only for what changed since the last pass, and TagPeer for
// every tagged peer. vc.mu is held.
func (vc *viewConns) apply(cm connmgr.ConnManager, protect, tag, release []peer.ID) {
	before, tagged := vc.protected, vc.tagged
	for _, p := range release {
		if _, ok := before[p]; ok {
			cm.Unprotect(p, ViewTag)
		}
		if _, ok := tagged[p]; ok {
			cm.UntagPeer(p, ViewTag)
		}
	}
	vc.protected = make(map[peer.ID]struct{}, len(protect))
	for _, p := range protect {
		vc.protected[p] = struct{}{}
		if _, ok := before[p]; !ok {
			cm.Protect(p, ViewTag)
		}
		if _, ok := tagged[p]; ok {
			cm.UntagPeer(p, ViewTag)
		}
	}
	vc.tagged = make(map[peer.ID]struct{}, len(tag))
	for _, p := range tag {
		vc.tagged[p] = struct{}{}
		cm.TagPeer(p, ViewTag, viewTagWeight)
	}
}

// planViewConns splits the connected peers: the first max view peers by
// rank (then id) are to be protected, the other view peers tagged; released are the
// peers protected before that are no longer protected (gone from the view,
// disconnected or beyond max) and the connected peers outside the view.
func planViewConns(connected []peer.ID, inView func(peer.ID) bool, rank func(peer.ID) uint64, before map[peer.ID]struct{}, max int) (protect, tag, release []peer.ID) {
	type ranked struct {
		p peer.ID
		r uint64
	}
	order := make([]ranked, len(connected))
	for i, p := range connected {
		order[i] = ranked{p, rank(p)}
	}
	slices.SortFunc(order, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.r, b.r), strings.Compare(string(a.p), string(b.p)))
	})
	settled := make(map[peer.ID]struct{}) // protected now, or released already
	for _, o := range order {
		p := o.p
		switch {
		case !inView(p):
			release = append(release, p)
			settled[p] = struct{}{}
		case len(protect) < max:
			protect = append(protect, p)
			settled[p] = struct{}{}
		default:
			tag = append(tag, p)
		}
	}
	for p := range before {
		if _, ok := settled[p]; !ok {
			release = append(release, p) // disconnected, or tagged now
		}
	}
	return protect, tag, release
}

// every starts a goroutine of the node that runs f every d until the
// node stops.
func (n *Node) every(d time.Duration, f func()) {
	n.wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	})
}

// gossipSink adapts the live view to gossip.Sink: the view does not import
// the transport, so the two sync methods translate gossip's types.
type gossipSink struct {
	*view.View
	vet *vetter
	// interval is the heartbeat interval of the agents hosted here.
	interval func() time.Duration
}

// VetAuthor implements gossip.AuthorVetter: an announcement is forwarded
// only once its author has been reached.
func (s gossipSink) VetAuthor(ctx context.Context, author peer.ID, issued time.Time) bool {
	return s.vet.wait(ctx, author, issued)
}

func (s gossipSink) Synced(sa *record.SignedAgent, _ peer.ID, h gossip.Heard) {
	_ = s.View.Synced(sa, h.Age, h.Interval) // not news: nothing to do
}

func (s gossipSink) LiveRecords(limit int, keep func(*record.Agent) bool) []gossip.LiveRecord {
	recs := s.View.LiveRecords(limit, keep)
	out := make([]gossip.LiveRecord, len(recs))
	var hosted time.Duration
	for i, r := range recs {
		if r.Local {
			// The interval they beat at, which the budget stretches with
			// the view (100 s for 10 000 agents), not the base interval
			// the view starts them with: a peer that synced them judged
			// them by 5 s and found them silent 15 s later.
			if hosted == 0 {
				hosted = s.interval()
			}
			r.Interval = hosted
		}
		out[i] = gossip.LiveRecord{Record: r.Record, Heard: gossip.Heard{Age: r.Age, Interval: r.Interval}}
	}
	return out
}
