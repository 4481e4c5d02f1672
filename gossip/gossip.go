package gossip

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/peerlimit"
	"github.com/agentd/agentd/internal/weakctx"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// peerOutboundQueue is the number of RPCs pubsub queues for one peer
// before it drops them (pubsub's default is 32).
const peerOutboundQueue = 256

// AnnounceTopic is the network-wide topic every node joins.
const AnnounceTopic = "/agentd/announce/1.0.0"

// LivenessTopic carries peer_down claims (package liveness).
const LivenessTopic = "/agentd/liveness/1.0.0"

// SyncProtocol is the stream protocol that serves a node's live view to a
// neighbour that just joined.
const SyncProtocol = "/agentd/sync/1.0.0"

// ScopedSyncProtocol is SyncProtocol with the request's shards member
// honoured: the answer holds only agents in those shards. A node that
// serves it keeps to its interest (scoped liveness); a peer that serves
// only SyncProtocol is of the previous version, and a scoped node bridges
// the announce topic for it (see the package doc).
const ScopedSyncProtocol = "/agentd/sync/1.1.0"

// TrailSyncProtocol is ScopedSyncProtocol (the same request and answer)
// spoken by a node that syncs each shard it joins once more, syncTrail
// after the first sync succeeded (a trailing sync): a record announced
// while it joined, which the peers it first synced from did not hold yet,
// reaches it then. An author whose every peer on a record's shard topics
// lists it does not announce the record a second time for peers that
// joined with it (node package; docs/protocol.md, "Trailing shard syncs").
const TrailSyncProtocol = "/agentd/sync/1.2.0"

const (
	scenePrefix = "/agentd/scene/"
	sceneSuffix = "/1.0.0"
)

// topicRe matches the topics agentd nodes track for their peers: the
// announce topic, the liveness topic and scene topics. Subscriptions to anything else are not
// tracked (and at most maxSubsPerRPC are read from one RPC), so a peer
// cannot make this node keep state for arbitrary topics.
var topicRe = regexp.MustCompile(`^/agentd/(announce|liveness|shard/[0-9a-f]{4}|scene/[A-Za-z0-9][A-Za-z0-9._/@+-]{0,127})/1\.0\.0$`)

const maxSubsPerRPC = 128

// SceneTopic returns the topic of a scene: "/agentd/scene/<name>/1.0.0".
// It returns "" when name is not a valid identifier (record.ValidIdent).
func SceneTopic(name string) string {
	if !record.ValidIdent(name) {
		return ""
	}
	return scenePrefix + name + sceneSuffix
}

// SceneOfTopic returns the scene name of a scene topic.
func SceneOfTopic(topic string) (string, bool) {
	if !strings.HasPrefix(topic, scenePrefix) || !strings.HasSuffix(topic, sceneSuffix) {
		return "", false
	}
	name := topic[len(scenePrefix) : len(topic)-len(sceneSuffix)]
	if !record.ValidIdent(name) {
		return "", false
	}
	return name, true
}

// Sentinel errors.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("gossip: closed")
	// ErrNotStarted is returned by publishing before Start.
	ErrNotStarted = errors.New("gossip: not started")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("gossip: already started")
	// ErrForeignRecord is returned when publishing a record or beat that
	// names another peer: gossip binds every message to its author's host
	// key, so a node can only announce what it hosts.
	ErrForeignRecord = errors.New("gossip: record names another peer")
	// ErrRejected is returned when this node's own validator refuses a
	// message it was asked to publish; the error names the reason.
	ErrRejected = errors.New("gossip: message rejected")
	// ErrNotResendable is returned by PublishResend when a topic of the
	// record has a peer that does not list ResendProtocol (or none yet):
	// the record must be signed again and announced instead.
	ErrNotResendable = errors.New("gossip: a peer of the record's topics does not forward resends")
	// ErrInvalidScene is returned for a scene name that is not an identifier.
	ErrInvalidScene = errors.New("gossip: invalid scene name")
	// ErrSceneNotJoined is returned by LeaveScene for a scene not joined.
	ErrSceneNotJoined = errors.New("gossip: scene not joined")
	// ErrTooManyScenes is returned when Config.MaxScenes are joined.
	ErrTooManyScenes = errors.New("gossip: too many scenes")
	// ErrNoPeers is returned by Sync when no neighbour is connected.
	ErrNoPeers = errors.New("gossip: no peers to sync with")
)

// Sink receives what gossip accepts. The live view implements it.
type Sink interface {
	// CheckAnnounce and CheckBeat run inside the topic validator after the
	// signature checks: nil if the message is news; a *trust.RejectError
	// with ReasonReplay when its seq is not newer than what the view holds
	// or a tombstone covers it (the message is then ignored and counted).
	// They must be fast and must not block. They are advisory: deliveries
	// run later and concurrently, so Announce and Beat must re-check.
	CheckAnnounce(sa *record.SignedAgent) error
	CheckBeat(kind Kind, sb *record.SignedBeat) error
	// Announce and Beat deliver accepted messages, from the subscription
	// loop of the topic they arrived on (never from the validator). from is
	// the author, which the validator checked is the record's or beat's
	// peer_id; topic is the pubsub topic, or SyncProtocol for records
	// learnt by Sync. Each message is delivered once, with the first topic
	// it arrived on. Messages this node published are not delivered.
	Announce(sa *record.SignedAgent, from peer.ID, topic string)
	Beat(kind Kind, sb *record.SignedBeat, from peer.ID, topic string)
	// Synced delivers a verified record learnt by Sync that is news
	// (CheckAnnounce passed). heard says how long ago the neighbours last
	// heard from the agent (the freshest answer) and at what heartbeat
	// interval: a synced record is evidence of life that old, not proof
	// of life now, or a joiner would restart the liveness clock of every
	// agent that died shortly before it joined.
	Synced(sa *record.SignedAgent, from peer.ID, heard Heard)
	// UnknownAgent is called when a beat names an agent whose key is not
	// known (trust reason unknown_key), so the node can fetch that agent's
	// record from from over /agentd/record/1.0.0. Gossip calls it at most
	// once per agent per Config.UnknownAgentBackoff, from a small worker
	// pool, never from the validator; it may block. interval is the
	// heartbeat interval the beat claimed (0: none), not verified: the
	// agent's key is unknown.
	UnknownAgent(agentID string, from peer.ID, interval time.Duration)
	// LiveRecords returns up to limit records the view holds as alive
	// (only those keep accepts, when keep is not nil), each with when it
	// last heard from the agent; it answers sync requests.
	LiveRecords(limit int, keep func(*record.Agent) bool) []LiveRecord
}

// LiveRecord is one record of a live view, as a sync answer carries it.
type LiveRecord struct {
	Record *record.SignedAgent
	Heard  Heard
}

// Heard is what a live view knows of an agent's liveness: how long ago it
// last heard from the agent (zero for an agent it hosts) and the
// heartbeat interval the agent announced (zero if none).
type Heard struct {
	Age      time.Duration
	Interval time.Duration
}

// Gossip is agentd's GossipSub transport: the announce topic, scene
// topics, their validators and the sync protocol. Build it with New, call
// Start once, and Close when done.
type Gossip struct {
	h    host.Host
	cfg  Config
	v    *trust.Verifier
	sink Sink
	m    *metrics.Metrics
	log  *slog.Logger
	ps   *pubsub.PubSub
	// psCtx is the context pubsub runs under: g.ctx, holding the contexts
	// pubsub derives from it weakly.
	psCtx *weakctx.Context

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	started  bool
	closed   bool
	announce *topicState
	liveness *topicState
	scenes   map[string]*topicState
	shards   map[string]*topicState
	legacy   map[peer.ID]bool // announce-topic subscribers of the previous version (Scoped)
	syncQ    chan shardSync
	// trailQ: shards waiting for their trailing sync, and when the timer
	// armed last fires (guarded by mu).
	trailQ    map[*topicState]pendingTrail
	trailFire time.Time

	recent *recentCache
	resent *resendLog
	// wantedLimit bounds the beat requests forwarded per author.
	wantedLimit wantedLimit
	synced      *recordMemo // the records sync answers carried, decoded
	// own: the payloads publish is handing to pubsub right now, checked
	// once; pubsub validates a local message again on every topic it is
	// published on, and those checks find it here (by content key).
	ownMu   sync.Mutex
	own     map[[32]byte]ownPublish
	unknown *unknownQueue
	pen     *penalties // P5: deliveries of announcements whose author was not reached
	mesh    *meshTracker
	gate    *copyGate // nil when a topic's score weighs mesh deliveries (P3)
	warned  *peerSet  // peers warned about a newer minor version

	scoresMu   sync.Mutex
	scores     map[peer.ID]float64
	graylisted map[peer.ID]bool

	serveSem   chan struct{}
	syncLimits *peerlimit.Table
	// Heartbeat pulls served (PullProtocol).
	pullSem    chan struct{}
	pullLimits *peerlimit.Table

	onPeers func(topic string) // OnTopicPeers
}

type topicState struct {
	topic string
	scene string
	shard string
	t     *pubsub.Topic
	// The subscription: nil for the announce topic of a scoped node that
	// does not bridge it.
	sub    *pubsub.Subscription
	cancel context.CancelFunc
	done   chan struct{}
	// The peer watcher (announce and shard topics), and the number of
	// subscribers it has seen join and not leave.
	wstop     context.CancelFunc
	wdone     chan struct{}
	listeners atomic.Int32
	// Shard topics: syncs started since the topic last had no peer
	// (guarded by Gossip.mu), and ready, closed once one succeeded.
	syncs int
	ready chan struct{}
	// Whether every known peer of the topic lists a protocol, and when
	// that was found (Gossip.mu): Pullable's, Resendable's and
	// Requestable's answers.
	pullable, resendable, wantable, trailable speaks
	// trailed: a trailing sync of the shard was scheduled since the topic
	// last had no peer (Gossip.mu).
	trailed bool
}

// speaks is a topic's cached answer to "does every known peer list this
// protocol", found at at.
type speaks struct {
	ok bool
	at time.Time
}

// isReady reports whether a shard sync of ts succeeded.
func (ts *topicState) isReady() bool {
	select {
	case <-ts.ready:
		return true
	default:
		return false
	}
}

// New builds the GossipSub router on h with the configured parameters and
// peer scoring. It validates cfg (pubsub validates the router and score
// parameters too; its error is returned). The router runs until ctx ends or
// Close is called; topics are joined by Start and JoinScene. m and log may
// be nil.
func New(ctx context.Context, h host.Host, cfg Config, v *trust.Verifier, sink Sink, m *metrics.Metrics, log *slog.Logger) (*Gossip, error) {
	if h == nil || v == nil || sink == nil {
		return nil, errors.New("gossip: host, verifier and sink are required")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "gossip")
	if c.defaultScore {
		c.Score.IPColocationFactorWhitelist = append(c.Score.IPColocationFactorWhitelist, ownNets(h.Addrs())...)
	}
	g := &Gossip{
		h: h, cfg: c, v: v, sink: sink, m: m, log: log,
		scenes:     map[string]*topicState{},
		shards:     map[string]*topicState{},
		legacy:     map[peer.ID]bool{},
		syncQ:      make(chan shardSync, shardSyncQueue),
		recent:     newRecentCache(recentTTL, recentMax),
		resent:     newResendLog(resendLogMax),
		synced:     newRecordMemo(),
		warned:     newPeerSet(1024),
		scores:     map[peer.ID]float64{},
		graylisted: map[peer.ID]bool{},
		serveSem:   make(chan struct{}, c.SyncServeConcurrency),
		syncLimits: peerlimit.New(rate.Every(c.SyncServeInterval), c.SyncServeBurst, maxLimiters),
		pullSem:    make(chan struct{}, c.PullServeConcurrency),
		pullLimits: peerlimit.New(rate.Every(c.PullServeInterval), c.PullServeBurst, maxLimiters),
	}
	g.ctx, g.cancel = context.WithCancel(ctx)
	g.unknown = newUnknownQueue(c.UnknownAgentBackoff)
	g.pen = newPenalties()
	app := c.Score.AppSpecificScore
	score := *c.Score
	score.AppSpecificScore = func(p peer.ID) float64 { return app(p) + g.pen.score(p) + neutralScore }
	if score.SeenMsgTTL == 0 {
		score.SeenMsgTTL = seenTTL
	}
	c.Score = &score
	g.mesh = newMeshTracker(g)
	opts := []pubsub.Option{
		pubsub.WithGossipSubParams(*c.Params),
		pubsub.WithPeerScore(c.Score, c.Thresholds),
		pubsub.WithPeerScoreInspect(g.onScores, c.ScoreInspectPeriod),
		pubsub.WithPeerExchange(c.PeerExchange),
		pubsub.WithFloodPublish(c.FloodPublish),
		pubsub.WithMessageIdFn(MessageID),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithPeerOutboundQueueSize(peerOutboundQueue),
		pubsub.WithSeenMessagesTTL(seenTTL),
		pubsub.WithSubscriptionFilter(pubsub.WrapLimitSubscriptionFilter(pubsub.NewRegexpSubscriptionFilter(topicRe), maxSubsPerRPC)),
		pubsub.WithLogger(log.With("sub", "pubsub")),
		pubsub.WithRawTracer(g.mesh),
	}
	if !weighsMeshDeliveries(c) {
		var gated prometheus.Counter
		if m != nil {
			gated = m.CopiesGated
		}
		g.gate = newCopyGate(copyGateWindow, copyGateMax, copyGateMaxBytes, time.Now, gated)
		opts = append(opts, pubsub.WithAppSpecificRpcInspector(g.gate.inspect), pubsub.WithRawTracer(g.gate))
	}
	for _, t := range c.Tracers {
		opts = append(opts, pubsub.WithRawTracer(t))
	}
	// go-libp2p-pubsub v0.17.0 derives a context from this one per peer
	// session and never cancels it: with an ordinary context each stays
	// in the parent's children until the node stops (package weakctx).
	g.psCtx = weakctx.New(g.ctx)
	ps, err := pubsub.NewGossipSub(g.psCtx, h, opts...)
	if err != nil {
		g.cancel()
		return nil, fmt.Errorf("gossip: gossipsub: %w", err)
	}
	g.ps = ps
	return g, nil
}

// MessageID is the pubsub message id: base64url (unpadded) of SHA-256
// over the topic, the author and the payload, each length-prefixed (see
// the package doc). It is a content hash: the same signed payload from
// the same author on the same topic has one id however it travels, and a
// re-announcement differs by its seq and timestamp. The author is part of
// the hash so that nobody can occupy the id of an honest message by
// publishing its payload first under their own key; the topic is, so
// that the same announcement travels independently on the announce topic
// and a scene topic.
func MessageID(m *pb.Message) string {
	h := sha256.New()
	writePrefixed(h, []byte(m.GetTopic()))
	writePrefixed(h, m.GetFrom())
	h.Write(m.GetData())
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// writePrefixed writes b to h after its length as a uvarint.
func writePrefixed(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

// contentKey identifies a payload by its author across topics.
func contentKey(author peer.ID, data []byte) [32]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(author)))])
	_, _ = io.WriteString(h, string(author)) // a hash.Hash never fails
	h.Write(data)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Start joins the announce topic, starts the delivery loop and the
// unknown-agent workers, and registers the sync handler.
func (g *Gossip) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return ErrClosed
	case g.started:
		return ErrAlreadyStarted
	}
	ts, err := g.joinLocked(AnnounceTopic, "", "", !g.cfg.Scoped)
	if err != nil {
		return err
	}
	g.announce = ts
	g.started = true
	if err := g.watchLocked(ts); err != nil {
		return err
	}
	for range g.cfg.UnknownAgentWorkers {
		g.wg.Go(func() { g.unknown.work(g.ctx, g.sink) })
	}
	for range shardSyncWorkers {
		g.wg.Go(g.shardSyncWorker)
	}
	g.h.SetStreamHandler(SyncProtocol, g.handleSync)
	g.h.SetStreamHandler(ScopedSyncProtocol, g.handleSync)
	if g.trails() {
		g.h.SetStreamHandler(TrailSyncProtocol, g.handleSync)
	}
	if !g.cfg.DisableBatches {
		g.h.SetStreamHandler(BatchProtocol, refuseStream)
	}
	if !g.cfg.DisableResends {
		g.h.SetStreamHandler(ResendProtocol, refuseStream)
	}
	if g.cfg.OnWanted != nil {
		g.h.SetStreamHandler(WantedProtocol, refuseStream)
	}
	if g.cfg.LatestBeats != nil {
		g.h.SetStreamHandler(PullProtocol, g.handlePull)
	}
	g.log.Info("gossip started", "topic", AnnounceTopic, "scoped", g.cfg.Scoped, "peer_exchange", g.cfg.PeerExchange, "flood_publish", g.cfg.FloodPublish)
	return nil
}

// OnTopicPeers sets f, called whenever the announce topic or a shard
// topic goes from no known subscriber to at least one: the first peer
// after joining, or the first after the node lost every topic peer (a
// partition, a network change). A message published while no peer was
// subscribed reached nobody; from f the node has its hosted records of
// that topic announced again, so a new agent is known at once rather than
// at its first heartbeat. f runs on a goroutine of this package, one call
// at a time per topic, and holds up that topic's peer events while it
// runs: it should hand the work off. Set it before Start.
func (g *Gossip) OnTopicPeers(f func(topic string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onPeers = f
}

// joinLocked registers the validator, joins topic and, if subscribe,
// subscribes and starts its delivery loop. g.mu is held.
func (g *Gossip) joinLocked(topic, scene, shard string, subscribe bool) (*topicState, error) {
	val := func(ctx context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		return g.validate(ctx, topic, scene, shard, msg)
	}
	if err := g.ps.RegisterTopicValidator(topic, val); err != nil {
		return nil, fmt.Errorf("gossip: validator for %s: %w", topic, err)
	}
	fail := func(err error) (*topicState, error) {
		_ = g.ps.UnregisterTopicValidator(topic)
		return nil, err
	}
	t, err := g.ps.Join(topic)
	if err != nil {
		return fail(fmt.Errorf("gossip: join %s: %w", topic, err))
	}
	if scene != "" || shard != "" {
		// A quiet topic costs nobody: P3 (mesh deliveries) is off.
		if err := t.SetScoreParams(g.cfg.SceneTopicScore); err != nil {
			_ = t.Close()
			return fail(fmt.Errorf("gossip: score parameters for %s: %w", topic, err))
		}
	}
	ts := &topicState{topic: topic, scene: scene, shard: shard, t: t, ready: make(chan struct{})}
	if subscribe {
		if err := g.subscribeLocked(ts); err != nil {
			_ = t.Close()
			return fail(err)
		}
	}
	return ts, nil
}

// subscribeLocked subscribes to a joined topic and starts its delivery
// loop. g.mu is held.
func (g *Gossip) subscribeLocked(ts *topicState) error {
	sub, err := ts.t.Subscribe(pubsub.WithBufferSize(g.cfg.SubscriptionBuffer))
	if err != nil {
		return fmt.Errorf("gossip: subscribe %s: %w", ts.topic, err)
	}
	ctx, cancel := context.WithCancel(g.ctx)
	done := make(chan struct{})
	ts.sub, ts.cancel, ts.done = sub, cancel, done
	g.wg.Go(func() { g.deliver(ctx, ts.topic, sub, done) })
	return nil
}

// unsubscribe stops a topic's delivery loop; the topic stays joined.
// g.mu must not be held.
func unsubscribe(sub *pubsub.Subscription, cancel context.CancelFunc, done chan struct{}) {
	if sub == nil {
		return
	}
	sub.Cancel()
	cancel()
	<-done
}

// deliver hands accepted messages of one topic to the sink.
func (g *Gossip) deliver(ctx context.Context, topic string, sub *pubsub.Subscription, done chan struct{}) {
	defer close(done)
	self := g.h.ID()
	selfStr := self.String()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		author := msg.GetFrom()
		if msg.Local || author == self {
			continue
		}
		a, ok := msg.ValidatorData.(*accepted)
		if !ok || a.dup {
			continue
		}
		switch a.msg.Kind {
		case KindAnnounce:
			g.sink.Announce(a.msg.Agent, author, topic)
		case KindBeats:
			for _, sb := range a.beats {
				g.sink.Beat(KindHeartbeat, sb, author, topic)
			}
		case KindWanted:
			if g.cfg.OnWanted != nil && a.msg.Wanted.PeerID == selfStr {
				g.cfg.OnWanted(author, a.msg.Wanted.Agents)
			}
		default:
			g.sink.Beat(a.msg.Kind, a.msg.Beat, author, topic)
		}
	}
}

// JoinLiveness joins the liveness topic with validate as its validator
// (package liveness decides what a peer_down claim is worth; it may block
// up to a few seconds, as it pings the peer). Accepted messages are
// forwarded by the router; there is nothing to deliver.
func (g *Gossip) JoinLiveness(validate func(ctx context.Context, from peer.ID, data []byte) pubsub.ValidationResult) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return ErrClosed
	case g.liveness != nil:
		return nil
	}
	val := func(ctx context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		return validate(ctx, msg.GetFrom(), msg.GetData())
	}
	if err := g.ps.RegisterTopicValidator(LivenessTopic, val, pubsub.WithValidatorTimeout(livenessValidateTimeout)); err != nil {
		return fmt.Errorf("gossip: validator for %s: %w", LivenessTopic, err)
	}
	t, err := g.ps.Join(LivenessTopic)
	if err != nil {
		_ = g.ps.UnregisterTopicValidator(LivenessTopic)
		return fmt.Errorf("gossip: join %s: %w", LivenessTopic, err)
	}
	// Scored as a scene topic: a peer that forwards malformed claims pays
	// in P4; P3 is off, so a quiet topic costs nobody.
	if err := t.SetScoreParams(g.cfg.SceneTopicScore); err != nil {
		_ = t.Close()
		_ = g.ps.UnregisterTopicValidator(LivenessTopic)
		return fmt.Errorf("gossip: score parameters for %s: %w", LivenessTopic, err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		_ = t.Close()
		_ = g.ps.UnregisterTopicValidator(LivenessTopic)
		return fmt.Errorf("gossip: subscribe %s: %w", LivenessTopic, err)
	}
	ctx, cancel := context.WithCancel(g.ctx)
	ts := &topicState{topic: LivenessTopic, t: t, sub: sub, cancel: cancel, done: make(chan struct{})}
	g.wg.Go(func() {
		defer close(ts.done)
		for {
			if _, err := sub.Next(ctx); err != nil {
				return
			}
		}
	})
	g.liveness = ts
	return nil
}

// livenessValidateTimeout bounds the liveness validator (a ping of 1 s
// and room to spare).
const livenessValidateTimeout = 3 * time.Second

// PublishLiveness publishes a message on the liveness topic.
func (g *Gossip) PublishLiveness(ctx context.Context, data []byte) error {
	g.mu.Lock()
	ts := g.liveness
	closed := g.closed
	g.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case ts == nil:
		return ErrNotStarted
	}
	return ts.t.Publish(ctx, data)
}

// leave stops a topic's peer watcher and delivery loop and leaves the
// topic. g.mu must not be held; ts is no longer in g's maps.
func (g *Gossip) leave(ts *topicState) {
	if ts.wstop != nil {
		// The topic cannot close while its event handler is registered.
		ts.wstop()
		<-ts.wdone
	}
	g.mu.Lock()
	sub, cancel, done := ts.sub, ts.cancel, ts.done
	ts.sub = nil
	g.mu.Unlock()
	unsubscribe(sub, cancel, done)
	_ = g.ps.UnregisterTopicValidator(ts.topic)
	if err := ts.t.Close(); err != nil && g.ctx.Err() == nil {
		g.log.Debug("close topic failed", "topic", ts.topic, "err", err)
	}
}

// PublishAnnounce publishes sa on the announce topic and on the joined
// scene topics of its skills. sa must name this host's peer id. The
// record is verified like a received one (except for the replay check),
// so a record the network would refuse is refused here with ErrRejected.
func (g *Gossip) PublishAnnounce(ctx context.Context, sa *record.SignedAgent) error {
	_, err := g.publishAnnounce(ctx, sa, 0)
	return err
}

// PublishResend publishes the n-th resend of sa (1 … MaxResend; see
// EncodeResend): the same signed record, announced again on its topics
// for peers that missed it, without a new seq. The record must be one
// this node announced before (a record restored from disk may be covered
// by a tombstone at its peers, so it is signed again instead), and n
// must be new for its seq (pubsub drops a payload it has published). It
// returns ErrNotResendable, and publishes nothing, unless every peer this
// node knows on each of the record's topics lists ResendProtocol: a node
// of an earlier version that holds the record ignores a resend, so
// toward it the record is signed again as before.
func (g *Gossip) PublishResend(ctx context.Context, sa *record.SignedAgent, n int) error {
	if n < 1 || n > MaxResend {
		return fmt.Errorf("%w: resend %d is not within 1 … %d", ErrRejected, n, MaxResend)
	}
	sent, err := g.publishAnnounce(ctx, sa, n)
	if sent && g.m != nil {
		g.m.Resends.WithLabelValues("sent").Inc()
	}
	return err
}

// publishAnnounce is PublishAnnounce (resend 0) and PublishResend. It
// reports whether the message went to a topic.
func (g *Gossip) publishAnnounce(ctx context.Context, sa *record.SignedAgent, resend int) (sent bool, err error) {
	if sa == nil {
		return false, fmt.Errorf("%w: nil record", ErrRejected)
	}
	if sa.Agent.PeerID != g.h.ID().String() {
		return false, fmt.Errorf("%w: record of agent %s names peer %s, this host is %s", ErrForeignRecord, sa.Agent.AgentID, sa.Agent.PeerID, g.h.ID())
	}
	if resend > 0 && g.cfg.DisableResends {
		return false, ErrNotResendable
	}
	data, err := encodeAnnounce(sa, resend)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	if len(data) > g.cfg.MaxMessageBytes {
		return false, fmt.Errorf("%w: announcement of %d bytes, limit %d", ErrRejected, len(data), g.cfg.MaxMessageBytes)
	}
	topics, err := g.publishTopics(sa.Agent.AllScenes(), sa.Agent.Shards())
	if err != nil {
		return false, err
	}
	if topics = heard(topics); len(topics) == 0 {
		return false, nil // nobody would receive it; a topic's first peer gets hosted records then (republishLocals, sync)
	}
	if resend > 0 {
		now := time.Now()
		for _, ts := range topics {
			if !g.topicSpeaks(ts, ResendProtocol, now) {
				return false, ErrNotResendable
			}
		}
	}
	// sa is checked as a receiver would check it (a record the network
	// would refuse is refused here, and no peer penalises this node for
	// it), but not decoded again from the bytes just encoded from it; its
	// signatures were usually verified moments ago by the same verifier
	// (node.host_), whose cache answers.
	if err := g.v.VerifyAgent(sa, trust.VerifyOptions{From: g.h.ID(), Transport: "local"}); err != nil {
		return false, fmt.Errorf("%w (%s): %v", ErrRejected, verifyReason(err), err)
	}
	pre := &accepted{msg: &Message{Version: record.ProtocolVersion, Kind: KindAnnounce, Agent: sa, Resend: resend}}
	err = g.publish(ctx, KindAnnounce, data, topics, pre)
	return err == nil, err
}

// PublishBeat publishes a heartbeat, status or unregister statement on the
// announce topic (see publishTopics) and on the joined shard topics among
// shards, which should be the shards of the agent's record. sb must name
// this host's peer id, and the agent's key must be known to the verifier
// (verify the agent's own record first).
func (g *Gossip) PublishBeat(ctx context.Context, kind Kind, sb *record.SignedBeat, shards ...string) error {
	if sb == nil {
		return fmt.Errorf("%w: nil beat", ErrRejected)
	}
	if sb.Beat.PeerID != g.h.ID().String() {
		return fmt.Errorf("%w: %s of agent %s names peer %s, this host is %s", ErrForeignRecord, kind, sb.Beat.AgentID, sb.Beat.PeerID, g.h.ID())
	}
	if err := sb.Beat.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	data, err := EncodeBeat(kind, sb)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	topics, err := g.publishTopics(nil, shards)
	if err != nil {
		return err
	}
	// A beat this node signed a moment ago is not decoded and verified
	// again before it leaves; every receiver verifies it. This was most
	// of a hosting node's idle CPU: 100 beats a second at the default
	// budget.
	pre := &accepted{msg: &Message{Version: record.ProtocolVersion, Kind: kind, Beat: sb}}
	return g.publish(ctx, kind, data, topics, pre)
}

// publishTopics returns the topics of a message: the joined shard topics
// among shards, the joined scene topics among scenes, and the announce
// topic — always for an unscoped node; for a scoped node only when some
// peer subscribes to it (an unscoped node or one of the previous
// version), so an all-scoped network carries nothing there.
func (g *Gossip) publishTopics(scenes, shards []string) ([]*topicState, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return nil, ErrClosed
	case !g.started:
		return nil, ErrNotStarted
	}
	var out []*topicState
	if !g.cfg.Scoped || g.announce.sub != nil || g.announce.hasPeers() {
		out = append(out, g.announce)
	}
	for _, s := range shards {
		if ts, ok := g.shards[s]; ok && (ts.sub != nil || ts.hasPeers()) {
			out = append(out, ts)
		}
	}
	for _, s := range scenes {
		if ts, ok := g.scenes[s]; ok {
			out = append(out, ts)
		}
	}
	return out, nil
}

// Listened reports whether a message on these shards would reach another
// node now: some peer subscribes to the announce topic or to one of the
// joined shard topics among shards. A heartbeat nobody hears is not worth
// signing.
func (g *Gossip) Listened(shards ...string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || !g.started {
		return false
	}
	if g.announce.hasPeers() {
		return true
	}
	for _, s := range shards {
		if ts, ok := g.shards[s]; ok && ts.hasPeers() {
			return true
		}
	}
	return false
}

func (g *Gossip) publish(ctx context.Context, kind Kind, data []byte, topics []*topicState, a *accepted) error {
	// A topic no peer subscribes to is skipped: pubsub would sign the
	// message, check its own signature and send it to nobody. A node that
	// re-signs 100 000 hosted records after a restart, alone, spent 30 %
	// of its CPU that way.
	if topics = heard(topics); len(topics) == 0 {
		return nil
	}
	// Check first, for an error that says why; pubsub runs the validator
	// again on publication, which then only says "validation failed". The
	// scene topics were chosen from the record's own scenes, so the
	// announce topic's check covers them. A caller that built the message
	// itself passes it as a.
	if a == nil {
		var reason trust.Reason
		var err error
		if a, _, reason, err = g.check(AnnounceTopic, "", "", data, g.h.ID()); err != nil {
			return fmt.Errorf("%w (%s): %v", ErrRejected, reason, err)
		}
	}
	key := contentKey(g.h.ID(), data)
	g.ownMu.Lock()
	if g.own == nil {
		g.own = map[[32]byte]ownPublish{}
	}
	o := g.own[key]
	o.a, o.refs = a, o.refs+1
	g.own[key] = o
	g.ownMu.Unlock()
	defer func() {
		g.ownMu.Lock()
		if o := g.own[key]; o.refs <= 1 {
			delete(g.own, key)
		} else {
			o.refs--
			g.own[key] = o
		}
		g.ownMu.Unlock()
	}()
	var errs []error
	for _, ts := range topics {
		if err := ts.t.Publish(ctx, data); err != nil {
			errs = append(errs, fmt.Errorf("publish %s on %s: %w", kind, ts.topic, err))
			continue
		}
		if g.m != nil {
			g.m.GossipPublished.WithLabelValues(kind).Inc()
		}
	}
	return errors.Join(errs...)
}

// heard returns the topics that some peer subscribes to.
func heard(topics []*topicState) []*topicState {
	out := topics[:0:0]
	for _, ts := range topics {
		if ts.hasPeers() {
			out = append(out, ts)
		}
	}
	return out
}

// hasPeers reports whether some peer subscribes to the topic. A watched
// topic (the announce topic, shard topics) answers from its watcher's
// count, not from Topic.ListPeers: each of those is a round trip through
// pubsub's event loop, and a node hosting 10 000 agents asked three times
// per heartbeat — 300 round trips and 600 goroutine wake-ups a second,
// most of what it spent idle with one peer listening. The count trails
// pubsub by the watcher's turn; what is published in that moment to a
// topic's first peer is sent again when the watcher sees the peer
// (OnTopicPeers).
func (ts *topicState) hasPeers() bool {
	if ts.wdone != nil {
		return ts.listeners.Load() > 0
	}
	return len(ts.t.ListPeers()) > 0
}

type ownPublish struct {
	a    *accepted
	refs int
}

// ownChecked returns the check of a payload this node is publishing now.
func (g *Gossip) ownChecked(data []byte) *accepted {
	g.ownMu.Lock()
	defer g.ownMu.Unlock()
	if len(g.own) == 0 {
		return nil
	}
	return g.own[contentKey(g.h.ID(), data)].a
}

// JoinScene subscribes to a scene topic (seed 001 §4): its members are the
// agents announcing skills in the scene. Joining a scene already joined
// does nothing.
func (g *Gossip) JoinScene(name string) error {
	topic := SceneTopic(name)
	if topic == "" {
		return fmt.Errorf("%w: %q", ErrInvalidScene, record.Truncate(name, 64))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if _, ok := g.scenes[name]; ok {
		return nil
	}
	if len(g.scenes) >= g.cfg.MaxScenes {
		return fmt.Errorf("%w: %d joined, limit %d", ErrTooManyScenes, len(g.scenes), g.cfg.MaxScenes)
	}
	ts, err := g.joinLocked(topic, name, "", true)
	if err != nil {
		return err
	}
	g.scenes[name] = ts
	g.log.Info("scene joined", "scene", name, "topic", topic)
	return nil
}

// LeaveScene unsubscribes from a scene topic.
func (g *Gossip) LeaveScene(name string) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	ts, ok := g.scenes[name]
	if !ok {
		g.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrSceneNotJoined, record.Truncate(name, 64))
	}
	delete(g.scenes, name)
	g.mu.Unlock()
	g.leave(ts)
	g.log.Info("scene left", "scene", name)
	return nil
}

// Scenes returns the joined scenes, sorted.
func (g *Gossip) Scenes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.scenes))
	for s := range g.scenes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TopicPeers returns the peers known to be in the announce topic.
func (g *Gossip) TopicPeers() []peer.ID {
	g.mu.Lock()
	ts := g.announce
	g.mu.Unlock()
	if ts == nil {
		return nil
	}
	return ts.t.ListPeers()
}

// ScenePeers returns the peers known to be in a joined scene topic.
func (g *Gossip) ScenePeers(name string) []peer.ID {
	g.mu.Lock()
	ts := g.scenes[name]
	g.mu.Unlock()
	if ts == nil {
		return nil
	}
	return ts.t.ListPeers()
}

// MeshPeers returns this node's mesh peers in a topic (AnnounceTopic or
// a SceneTopic): the peers it forwards every message to.
func (g *Gossip) MeshPeers(topic string) []peer.ID { return g.mesh.peers(topic) }

// PeerScores returns the latest peer scores computed by the router
// (refreshed every Config.ScoreInspectPeriod).
func (g *Gossip) PeerScores() map[peer.ID]float64 {
	g.scoresMu.Lock()
	defer g.scoresMu.Unlock()
	out := make(map[peer.ID]float64, len(g.scores))
	for p, s := range g.scores {
		out[p] = s
	}
	return out
}

// CopiesDropped returns how many received message copies were dropped
// before pubsub's signature check as identical to a copy in it (copyGate).
func (g *Gossip) CopiesDropped() uint64 {
	if g.gate == nil {
		return 0
	}
	return g.gate.Dropped()
}

// weighsMeshDeliveries reports whether a topic's score parameters count
// the copies mesh peers deliver (P3, P3b), which the copy gate would hide.
func weighsMeshDeliveries(c Config) bool {
	weighs := func(t *pubsub.TopicScoreParams) bool {
		return t != nil && (t.MeshMessageDeliveriesWeight != 0 || t.MeshFailurePenaltyWeight != 0)
	}
	if weighs(c.SceneTopicScore) {
		return true
	}
	for _, t := range c.Score.Topics {
		if weighs(t) {
			return true
		}
	}
	return false
}

// onScores is the pubsub score inspector. pubsub calls it in a goroutine
// of its own, so it only copies and logs.
func (g *Gossip) onScores(scores map[peer.ID]float64) {
	if g.gate != nil {
		g.gate.setScores(scores)
	}
	g.scoresMu.Lock()
	defer g.scoresMu.Unlock()
	g.scores = scores
	limit := g.cfg.Thresholds.GraylistThreshold
	for p, s := range scores {
		below := s < limit
		if below && !g.graylisted[p] {
			g.log.Warn("peer graylisted", "peer_id", p, "score", s)
		}
		if below {
			g.graylisted[p] = true
		} else {
			delete(g.graylisted, p)
		}
	}
	for p := range g.graylisted {
		if _, ok := scores[p]; !ok {
			delete(g.graylisted, p)
		}
	}
}

// neutralScore is added to every peer's application-specific score, so
// that a peer that did nothing wrong scores above zero. pubsub keeps the
// score of a peer that leaves with a score of zero or less for
// RetainScore (6 h), so that a penalised peer cannot reconnect to shed
// its penalty; at zero that kept every peer a node ever connected to for
// a lookup — its stats, IP sets and whitelist cache, about 1.2 KB each,
// 1.2 MB per node (16 % of the heap) at the end of a 1 000-node simnet
// run, and growing with the network. Any penalty (P4, P6, P7, agentd's
// own) outweighs it, so a penalised peer is still kept; every threshold
// but opportunistic grafting's (1) is at or below zero, and this moves a
// mesh's median by a thousandth.
const neutralScore = 1e-3

// Close leaves every topic, stops the router and waits for the loops and
// handlers this package started. It is idempotent. Close the host after.
func (g *Gossip) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	started := g.started
	var topics []*topicState
	if g.announce != nil {
		topics = append(topics, g.announce)
	}
	if g.liveness != nil {
		topics = append(topics, g.liveness)
	}
	for _, ts := range g.scenes {
		topics = append(topics, ts)
	}
	for _, ts := range g.shards {
		topics = append(topics, ts)
	}
	g.scenes = map[string]*topicState{}
	g.shards = map[string]*topicState{}
	g.mu.Unlock()
	if started {
		g.h.RemoveStreamHandler(SyncProtocol)
		g.h.RemoveStreamHandler(ScopedSyncProtocol)
		g.h.RemoveStreamHandler(TrailSyncProtocol)
		g.h.RemoveStreamHandler(BatchProtocol)
		g.h.RemoveStreamHandler(PullProtocol)
		g.h.RemoveStreamHandler(ResendProtocol)
		g.h.RemoveStreamHandler(WantedProtocol)
	}
	for _, ts := range topics {
		g.leave(ts)
	}
	g.cancel()
	g.wg.Wait()
	return nil
}

// enter registers a stream handler run; false after Close.
func (g *Gossip) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}
