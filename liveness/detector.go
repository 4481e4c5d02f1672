package liveness

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/internal/peerlimit"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

func suspicions(m *metrics.Metrics) *prometheus.CounterVec   { return m.Suspicions }
func downClaims(m *metrics.Metrics) *prometheus.CounterVec   { return m.DownClaims }
func probesServed(m *metrics.Metrics) *prometheus.CounterVec { return m.Probes }

// Config tunes the detector. Zero values take the defaults.
type Config struct {
	// PingTimeout bounds one direct attempt to reach a peer: dial and
	// answer (default 2 s).
	PingTimeout time.Duration
	// AskTimeout bounds an indirect probe through a helper (default 3 s:
	// the helper's own ping and a round trip).
	AskTimeout time.Duration
	// Helpers is how many connected peers are asked to reach a suspect
	// (default 3, SWIM's k).
	Helpers int
	// Cooldown: a suspect found alive is not suspected again sooner
	// (default 10 s), so a connection manager that trims the connection
	// does not make the node probe it in a loop.
	Cooldown time.Duration
	// ClaimWindow: a peer_down claim older than this, or dated further
	// ahead than a tenth of it, is ignored; a confirmation is remembered
	// this long (default 60 s).
	ClaimWindow time.Duration
	// Workers investigate suspects concurrently (default 4); Queue bounds
	// the suspects waiting (default 256).
	Workers, Queue int
	// ClaimJitter: a node that confirmed a peer down itself publishes its
	// claim after a random delay below this (default 1 s), and not at all
	// when another node's claim about the peer reached it meanwhile (it
	// forwards that one instead). Every node connected to a crashed peer
	// confirms it within moments; without the delay each published a
	// claim and every node received them all (SWIM's suppression; in a
	// 100-node simnet these were most of the copies GossipSub refused).
	ClaimJitter time.Duration
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PingTimeout, 2*time.Second)
	def(&c.AskTimeout, 3*time.Second)
	def(&c.Cooldown, 10*time.Second)
	def(&c.ClaimWindow, time.Minute)
	def(&c.ClaimJitter, time.Second)
	if c.Helpers <= 0 {
		c.Helpers = 3
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Queue <= 0 {
		c.Queue = 256
	}
}

// Hooks connect the detector to the node.
type Hooks struct {
	// Holds reports whether the live view holds agents of p: only those
	// peers are worth suspecting.
	Holds func(p peer.ID) bool
	// Down is called once p is confirmed unreachable; reason is
	// ReasonPeerDown. It must not block for long.
	Down func(p peer.ID)
	// Publish sends a peer_down message on the liveness topic (nil: the
	// node does not gossip its confirmations).
	Publish func(ctx context.Context, data []byte) error
}

// Detector suspects a peer whose last connection closed, confirms it
// through the peer itself and through other peers, and tells the node
// (see the package doc).
type Detector struct {
	h     host.Host
	cfg   Config
	hooks Hooks
	m     *metrics.Metrics
	log   *slog.Logger
	srv   *server
	nb    *network.NotifyBundle

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	q      chan peer.ID

	mu      sync.Mutex
	started bool
	closed  bool
	queued  map[peer.ID]bool
	alive   map[peer.ID]time.Time // last found alive by a ping
	down    map[peer.ID]downEntry // confirmed unreachable
	claimRL *peerlimit.Table
	// claimWait waits before this node's own claim is published (the
	// jitter; tests replace it); false when ctx ended first.
	claimWait func(ctx context.Context) bool
}

type downEntry struct {
	at        time.Time
	forwarded bool // a peer_down claim about it was published or forwarded
}

// New builds a detector on h; Start runs it.
func New(h host.Host, cfg Config, hooks Hooks, m *metrics.Metrics, log *slog.Logger) *Detector {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Detector{
		h: h, cfg: cfg, hooks: hooks, m: m, log: log.With("component", "liveness"),
		q: make(chan peer.ID, cfg.Queue), queued: map[peer.ID]bool{}, alive: map[peer.ID]time.Time{},
		down: map[peer.ID]downEntry{}, claimRL: peerlimit.New(1, 10, maxLimiters),
	}
	d.claimWait = d.jitterWait
	d.srv = newServer(d)
	d.nb = &network.NotifyBundle{DisconnectedF: d.disconnected, ConnectedF: d.connected}
	return d
}

// Start serves probes, follows the host's connections and starts the
// workers; they run until Close or ctx ends.
func (d *Detector) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.closed {
		return
	}
	d.started = true
	d.ctx, d.cancel = context.WithCancel(ctx)
	d.h.SetStreamHandler(ProbeProtocol, d.srv.handle)
	d.h.Network().Notify(d.nb)
	for range d.cfg.Workers {
		d.wg.Go(d.work)
	}
}

// Close stops the workers and the probe handler and waits for them.
func (d *Detector) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	started := d.started
	d.mu.Unlock()
	if !started {
		return nil
	}
	d.h.Network().StopNotify(d.nb)
	d.h.RemoveStreamHandler(ProbeProtocol)
	d.cancel()
	d.wg.Wait()
	return nil
}

// enter registers a handler run; false once closed.
func (d *Detector) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || !d.started {
		return false
	}
	d.wg.Add(1)
	return true
}

// disconnected suspects a peer whose last connection closed.
func (d *Detector) disconnected(_ network.Network, c network.Conn) {
	p := c.RemotePeer()
	if d.h.Network().Connectedness(p) == network.Connected {
		return
	}
	d.Suspect(p)
}

// connected: a peer that connects is alive, whatever was said of it.
func (d *Detector) connected(_ network.Network, c network.Conn) {
	p := c.RemotePeer()
	d.mu.Lock()
	delete(d.down, p)
	d.mu.Unlock()
}

// Suspect queues p for investigation unless it is queued, was found
// alive within the cooldown, was confirmed down already, or the view
// holds none of its agents; it reports whether p was queued. It never
// blocks.
func (d *Detector) Suspect(p peer.ID) bool {
	if p == d.h.ID() || (d.hooks.Holds != nil && !d.hooks.Holds(p)) {
		return false
	}
	now := time.Now()
	d.mu.Lock()
	e, down := d.down[p]
	if d.closed || !d.started || d.queued[p] || now.Sub(d.alive[p]) < d.cfg.Cooldown ||
		(down && now.Sub(e.at) < d.cfg.ClaimWindow) {
		d.mu.Unlock()
		return false
	}
	d.queued[p] = true
	d.mu.Unlock()
	select {
	case d.q <- p:
		return true
	default:
		d.mu.Lock()
		delete(d.queued, p)
		d.mu.Unlock()
		d.m.Inc(suspicions, "queue_full")
		return false
	}
}

func (d *Detector) work() {
	for {
		select {
		case <-d.ctx.Done():
			return
		case p := <-d.q:
			outcome := d.investigate(d.ctx, p)
			d.mu.Lock()
			delete(d.queued, p)
			d.mu.Unlock()
			if outcome != "" {
				d.m.Inc(suspicions, outcome)
			}
		}
	}
}

// investigate decides about a suspect: ping it; if that fails, ask up to
// Helpers connected peers to reach it; confirmed when nobody could and
// at least one helper tried, or, with no helper to ask, when its address
// refused the connection. It returns the outcome to count ("" when counted already or nothing to count).
func (d *Detector) investigate(ctx context.Context, p peer.ID) string {
	if d.h.Network().Connectedness(p) == network.Connected {
		// It came back (it dialled this node: its own suspicion of us) or
		// never left through another connection.
		d.markAlive(p)
		return "alive"
	}
	direct := d.reach(ctx, p)
	if direct == Alive {
		return "alive"
	}
	helpers := d.helpers(p)
	var (
		mu               sync.Mutex
		reached, unreach int
		wg               sync.WaitGroup
		actx, cancel     = context.WithTimeout(ctx, d.cfg.AskTimeout)
	)
	for _, hp := range helpers {
		wg.Go(func() {
			ok, err := ask(actx, d.h, hp, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
			case ok:
				reached++
			default:
				unreach++
			}
		})
	}
	wg.Wait()
	cancel()
	if ctx.Err() != nil {
		return ""
	}
	switch {
	case reached > 0:
		d.markAlive(p)
		return "refuted"
	case unreach == 0 && direct != Refused:
		// Nobody else could be asked, and silence is no proof: this node
		// may be the one cut off. The seed's timeout decides.
		return "unconfirmed"
	case d.h.Network().Connectedness(p) == network.Connected:
		d.markAlive(p) // it came back meanwhile
		return "alive"
	}
	// Counted before the node hears of it, so whoever sees the agent leave
	// also sees the count.
	d.m.Inc(suspicions, "confirmed")
	d.confirm(ctx, p, true)
	return ""
}

// helpers picks up to cfg.Helpers connected peers other than p that speak
// the probe protocol.
func (d *Detector) helpers(p peer.ID) []peer.ID {
	var out []peer.ID
	for _, q := range d.h.Network().Peers() {
		if q == p {
			continue
		}
		if ps, err := d.h.Peerstore().SupportsProtocols(q, ProbeProtocol); err == nil && len(ps) > 0 {
			out = append(out, q)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(len(out), d.cfg.Helpers)]
}

// reach pings p. A peer found alive is marked so (not suspected again
// within the cooldown), and a connection opened only for the ping is
// closed again: the connection that closed may have been trimmed by a
// connection manager, this node's or the peer's, and the detector must
// not fight it (the close it causes finds the peer marked alive).
func (d *Detector) reach(ctx context.Context, p peer.ID) Outcome {
	before := map[network.Conn]bool{}
	for _, c := range d.h.Network().ConnsToPeer(p) {
		before[c] = true
	}
	o := ping(ctx, d.h, p, d.cfg.PingTimeout)
	if o != Alive {
		return o
	}
	d.markAlive(p)
	// The connections this node dialled during the ping (the ping's own:
	// the swarm may have carried the ping over another), not those that
	// were open before nor those the peer dialled (when a connection drops
	// both sides suspect each other, and the peer's ping may be riding
	// one of them).
	for _, c := range d.h.Network().ConnsToPeer(p) {
		if !before[c] && c.Stat().Direction == network.DirOutbound {
			_ = c.Close()
		}
	}
	return o
}

func (d *Detector) markAlive(p peer.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.alive[p] = time.Now()
	if len(d.alive) > maxLimiters {
		now := time.Now()
		for q, t := range d.alive {
			if now.Sub(t) >= d.cfg.Cooldown {
				delete(d.alive, q)
			}
		}
	}
	delete(d.down, p)
}

// confirm records p as down, tells the node, and publishes the claim when
// this node found it itself (publish).
func (d *Detector) confirm(ctx context.Context, p peer.ID, publish bool) {
	now := time.Now()
	d.mu.Lock()
	// Not forwarded yet: a claim of another node arriving before this
	// node's own is published is forwarded (claimKnown) and replaces it.
	d.down[p] = downEntry{at: now, forwarded: !publish || d.hooks.Publish == nil}
	if len(d.down) > maxLimiters {
		for q, e := range d.down {
			if now.Sub(e.at) >= d.cfg.ClaimWindow {
				delete(d.down, q)
			}
		}
	}
	d.mu.Unlock()
	d.log.Info("peer confirmed unreachable", "peer_id", p)
	if d.hooks.Down != nil {
		d.hooks.Down(p)
	}
	if publish && d.hooks.Publish != nil && d.enter() {
		go func() {
			defer d.wg.Done()
			d.publishClaim(ctx, p, now)
		}()
	}
}

// publishClaim publishes this node's claim that p is down, confirmed at
// at, once claimWait has passed, unless a claim about p was forwarded
// here meanwhile.
func (d *Detector) publishClaim(ctx context.Context, p peer.ID, at time.Time) {
	d.mu.Lock()
	wait := d.claimWait
	d.mu.Unlock()
	if !wait(ctx) {
		return
	}
	d.mu.Lock()
	e, ok := d.down[p]
	mine := ok && e.at.Equal(at) && !e.forwarded
	if mine {
		e.forwarded = true
		d.down[p] = e
	}
	d.mu.Unlock()
	if !mine {
		// Another node's claim went through here, or p came back.
		d.m.Inc(downClaims, "suppressed")
		return
	}
	data, err := EncodeClaim(p, at)
	if err == nil {
		err = d.hooks.Publish(ctx, data)
	}
	if err != nil && ctx.Err() == nil {
		d.log.Debug("peer_down not published", "peer_id", p, "err", err)
	}
}

// jitterWait waits a random time below ClaimJitter.
func (d *Detector) jitterWait(ctx context.Context) bool {
	return backoff.Sleep(ctx, rand.N(d.cfg.ClaimJitter))
}

// Down reports whether p was confirmed unreachable within the claim
// window and has not connected since.
func (d *Detector) Down(p peer.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.down[p]
	return ok && time.Since(e.at) < d.cfg.ClaimWindow
}

// ValidateClaim is the liveness topic's validator. A claim is forwarded
// (accepted) only once this node has confirmed it, by its own direct
// attempt to reach the peer or earlier by itself, and only the first
// claim about a peer is: so a lie stops at the first honest node, and one
// crash floods the network once. Malformed claims are rejected (the
// forwarding peer pays in its score); everything else is ignored.
func (d *Detector) ValidateClaim(ctx context.Context, author peer.ID, data []byte) pubsub.ValidationResult {
	c, err := DecodeClaim(data)
	if err != nil {
		if errors.Is(err, record.ErrUnsupportedVersion) {
			d.m.Inc(downClaims, "unsupported_version")
			return pubsub.ValidationIgnore
		}
		d.m.Inc(downClaims, "malformed")
		d.m.Reject("liveness", "malformed")
		return pubsub.ValidationReject
	}
	self := d.h.ID()
	switch {
	case author == self:
		return pubsub.ValidationAccept // our own claim, confirmed before publishing
	case c.Peer == author:
		d.m.Inc(downClaims, "malformed")
		d.m.Reject("liveness", "malformed")
		return pubsub.ValidationReject
	case c.Peer == self:
		d.m.Inc(downClaims, "self")
		return pubsub.ValidationIgnore
	}
	now := time.Now()
	if age := now.Sub(c.At); age > d.cfg.ClaimWindow || age < -d.cfg.ClaimWindow/10 {
		d.m.Inc(downClaims, "stale")
		return pubsub.ValidationIgnore
	}
	if !d.allowClaim(author) {
		d.m.Inc(downClaims, "rate_limited")
		return pubsub.ValidationIgnore
	}
	if res, done := d.claimKnown(c, now); done {
		return res
	}
	if d.hooks.Holds != nil && !d.hooks.Holds(c.Peer) {
		d.m.Inc(downClaims, "uninterested")
		return pubsub.ValidationIgnore
	}
	if len(d.h.Peerstore().Addrs(c.Peer)) == 0 {
		// No address to try: a failed dial would prove nothing, and a
		// liar could pick exactly such a peer.
		d.m.Inc(downClaims, "no_address")
		return pubsub.ValidationIgnore
	}
	if d.reach(ctx, c.Peer) == Alive {
		d.m.Inc(downClaims, "refuted")
		return pubsub.ValidationIgnore
	}
	if res, done := d.claimKnown(c, time.Now()); done {
		return res // another claim's validation confirmed it meanwhile
	}
	d.mu.Lock()
	d.down[c.Peer] = downEntry{at: time.Now(), forwarded: true}
	d.mu.Unlock()
	d.log.Info("peer confirmed unreachable", "peer_id", c.Peer, "claimed_by", author)
	d.m.Inc(downClaims, "confirmed")
	if d.hooks.Down != nil {
		d.hooks.Down(c.Peer)
	}
	return pubsub.ValidationAccept
}

// claimKnown answers a claim from what this node already knows of the
// peer: confirmed down (forward the first claim, ignore the others) or
// found alive a moment ago.
func (d *Detector) claimKnown(c *Claim, now time.Time) (pubsub.ValidationResult, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.down[c.Peer]; ok && now.Sub(e.at) < d.cfg.ClaimWindow {
		if e.forwarded {
			d.m.Inc(downClaims, "duplicate")
			return pubsub.ValidationIgnore, true
		}
		e.forwarded = true
		d.down[c.Peer] = e
		d.m.Inc(downClaims, "confirmed")
		return pubsub.ValidationAccept, true
	}
	if t, ok := d.alive[c.Peer]; ok && now.Sub(t) < cacheFor && t.After(c.At) {
		d.m.Inc(downClaims, "refuted")
		return pubsub.ValidationIgnore, true
	}
	return 0, false
}

// allowClaim bounds the claims one author can make this node check: one
// per second, bursts of 10.
func (d *Detector) allowClaim(author peer.ID) bool { return d.claimRL.Allow(author) }
