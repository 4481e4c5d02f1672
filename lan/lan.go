package lan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
)

// Sentinel errors.
var (
	// ErrClosed is returned by Start and Discover after Close.
	ErrClosed = errors.New("lan: closed")
	// ErrUnavailable is returned by Discover when no mechanism is up (see
	// Available for the reason).
	ErrUnavailable = errors.New("lan: unavailable")
	// ErrUnresolved is returned when no verified record could be obtained
	// for an agent seen on the LAN.
	ErrUnresolved = errors.New("lan: no verified record for the agent")
)

// Deps are the parts of the node the LAN code works with. Identity and
// Verifier are required; the functions are optional (a nil one turns the
// corresponding behaviour off).
type Deps struct {
	// Host is the libp2p host: mDNS advertises its TCP port, its peer id
	// is named in the TXT summaries of the records it hosts, libp2p's own
	// mDNS runs on it, and peers found on the LAN are connected. May be
	// nil (tests): then libp2p mDNS and connecting are off and the SRV
	// port is Config.Port.
	Host host.Host
	// Identity's agent key signs the UDP messages of hosted agents whose
	// record carries that key; its agent id is the SKILL_DISCOVER
	// requester id.
	Identity *trust.Identity
	// Verifier decides every record before it is handed to Learn and
	// holds the keys UDP messages are verified with.
	Verifier *trust.Verifier
	// Locals returns the records this node hosts; they are advertised.
	Locals func() []*record.SignedAgent
	// Learn hands a verified record to the node (source lan). It is
	// called again, at most once per broadcast interval and agent, while
	// the agent's heartbeats keep arriving (a record seen again proves
	// the agent alive).
	Learn func(sa *record.SignedAgent)
	// LearnUnbound admits a record without peer binding (source lan):
	// the seed-000 Announce an implementation of seed 000 alone publishes
	// in an mDNS TXT, signed by its agent key only. The node stamps,
	// verifies and learns it (node.Node.LearnUnbound). Nil ignores such
	// announcements.
	LearnUnbound func(sa *record.SignedAgent) error
	// SceneMembers lists the skills of a scene in the node's live view
	// (agentId, skillId, endpoint), for JOIN_SCENE_RESPONSE. May be nil.
	SceneMembers func(scene string) []record.SceneMember
	// Forget reports an agent that left the LAN: a verified
	// SKILL_UNREGISTER or an mDNS goodbye.
	Forget func(agentID string)
	// Status reports a verified SKILL_HEARTBEAT or SKILL_STATUS whose
	// status differs from the last one seen for that skill's agent.
	Status func(agentID string, st record.Status)
	// Fetch fetches and verifies the records a libp2p peer hosts over
	// /agentd/record/1.0.0; agentID "" asks for all of them.
	Fetch func(ctx context.Context, p peer.AddrInfo, agentID string) ([]*record.SignedAgent, error)
	// Resolve returns a record by agent id from the node (live view,
	// cache, DHT value /agentd/<agent-id>).
	Resolve func(ctx context.Context, agentID string) (*record.SignedAgent, error)
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Logger may be nil (logs are discarded).
	Logger *slog.Logger
	// Net opens the multicast sockets; nil means OSNetwork.
	Net Network
}

// LAN is zero-configuration LAN discovery: the seed-001 UDP multicast
// protocol, DNS-SD on mDNS and libp2p's mDNS peer discovery. Build it with
// New, start it with Start, stop it with Close.
type LAN struct {
	cfg       Config
	d         Deps
	net       Network
	log       *slog.Logger
	m         *metrics.Metrics
	udpGroup  netip.AddrPort
	mdnsGroup netip.AddrPort
	requester string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	jobs   chan job

	mu      sync.Mutex
	started bool
	closed  bool
	mechs   map[string]*mech

	hosted  *hostedSet
	agents  *agentTable
	foreign *foreignTable
	udp     *udpProto
	mdns    *mdnsProto
	peers   *peerBook

	p2pmdns   mdns.Service
	closeDone chan struct{} // closed when Close has finished
	kick      chan struct{} // hosted records changed: re-read and advertise the changes
	force     chan struct{} // re-send every registration
}

// Mechanism names, used in logs, metrics and Available's reason.
const (
	mechUDP  = "udp"
	mechMDNS = "mdns"
)

// New builds the LAN discovery without side effects: nothing is opened or
// sent before Start.
func New(cfg Config, d Deps) (*LAN, error) {
	cfg.defaults()
	g, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if d.Identity == nil {
		return nil, errors.New("lan: an identity is required")
	}
	if d.Verifier == nil {
		return nil, errors.New("lan: a verifier is required")
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nw := d.Net
	if nw == nil {
		nw = OSNetwork{}
	}
	req := cfg.RequesterID
	if req == "" {
		req = d.Identity.AgentID
	}
	l := &LAN{
		cfg: cfg, d: d, net: nw, log: log.With("component", "lan"), m: d.Metrics,
		udpGroup:  g,
		mdnsGroup: netip.AddrPortFrom(netip.MustParseAddr(mdnsGroup), mdnsPort),
		requester: req,
		jobs:      make(chan job, cfg.QueueSize),
		mechs:     map[string]*mech{},
		kick:      make(chan struct{}, 1),
		force:     make(chan struct{}, 1),
		closeDone: make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.hosted = newHostedSet(d.Identity)
	l.agents = newAgentTable(maxAgents)
	l.foreign = newForeignTable(maxForeign)
	l.peers = newPeerBook(maxPeers)
	if cfg.UDP.Enabled {
		l.udp = newUDPProto(l)
		l.mechs[mechUDP] = &mech{name: mechUDP, state: "not started"}
	}
	if cfg.MDNS.Enabled {
		l.mdns = newMDNSProto(l)
		l.mechs[mechMDNS] = &mech{name: mechMDNS, state: "not started"}
	}
	return l, nil
}

// mech is the state of one mechanism's socket.
type mech struct {
	name   string
	sock   Socket
	state  string // "" when up, else why not
	logged bool   // the unavailability was logged at warn level
}

// Start opens the sockets and starts the loops. A mechanism whose socket
// cannot be opened (no multicast interface, no permission) is reported by
// Available and retried every RetryInterval; Start does not fail for it.
func (l *LAN) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	locals := l.locals()
	// The goroutines are started under l.mu, so that a concurrent Close
	// either finds nothing started or waits for all of them.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.started {
		return errors.New("lan: already started")
	}
	l.started = true
	l.hosted.update(locals)
	for i := 0; i < l.cfg.Workers; i++ {
		l.goRun(l.worker)
	}
	l.goRun(l.maintain)
	l.goRun(l.announceLoop)
	if l.udp != nil {
		l.goRun(func(ctx context.Context) { l.supervise(ctx, mechUDP, l.udpGroup, 1, l.udp.serve) })
	}
	if l.mdns != nil {
		l.goRun(func(ctx context.Context) { l.supervise(ctx, mechMDNS, l.mdnsGroup, 255, l.mdns.serve) })
		l.goRun(l.mdns.queryLoop)
		if l.d.Host != nil {
			l.p2pmdns = l.startLibp2pMDNS()
		}
	}
	iface := l.cfg.Interface
	if iface == "" {
		iface = "every multicast interface"
	}
	attrs := []any{"interface", iface}
	if l.udp != nil {
		attrs = append(attrs, "udp", fmt.Sprintf("%s:%d", l.cfg.UDP.MulticastGroup, l.cfg.UDP.Port))
	} else {
		attrs = append(attrs, "udp", "off")
	}
	if l.mdns != nil {
		attrs = append(attrs, "mdns", fmt.Sprintf("%s on 224.0.0.251:%d", l.cfg.ServiceType, mdnsPort), "libp2p_mdns", l.p2pmdns != nil)
	} else {
		attrs = append(attrs, "mdns", "off")
	}
	// Sockets open in the background; one that cannot is logged once at
	// warn level with the reason and retried (Available).
	l.log.Info("LAN discovery started", attrs...)
	return nil
}

// announceLoop advertises the hosted agents: every broadcast interval it
// re-reads Locals, sends a SKILL_HEARTBEAT per skill and, every
// max(interval, timeout/2), a SKILL_REGISTER per skill; a changed or new
// record is registered (and its mDNS TXT re-announced) at once, on
// Refresh or at the next tick; a newcomer on the LAN makes it re-send
// every registration (at most once per second), so the newcomer learns
// the LAN within a round trip.
func (l *LAN) announceLoop(ctx context.Context) {
	interval := l.cfg.UDP.BroadcastInterval.D()
	regEvery := int(l.cfg.UDP.Timeout.D() / 2 / interval)
	if regEvery < 1 {
		regEvery = 1
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var (
		lastForced time.Time
		forceT     *time.Timer
		forceC     <-chan time.Time // a deferred forced re-announcement
	)
	defer func() {
		if forceT != nil {
			forceT.Stop()
		}
	}()
	for n := 1; ; {
		var all, beats bool
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-l.force:
			if wait := time.Second - time.Since(lastForced); wait > 0 {
				if forceC == nil {
					forceT = time.NewTimer(wait)
					forceC = forceT.C
				}
				continue
			}
			lastForced = time.Now()
			all = true
		case <-forceC:
			forceC = nil
			lastForced = time.Now()
			all = true
		case <-t.C:
			beats = true
			all = n%regEvery == 0
			n++
		}
		changed, gone := l.hosted.update(l.locals())
		if len(gone) > 0 {
			if l.udp != nil {
				l.udp.unregister(ctx, gone, record.ReasonShutdown)
			}
			if l.mdns != nil {
				l.mdns.goodbye(gone)
			}
		}
		if l.udp != nil {
			if all {
				l.udp.sendRegisters(l.hosted.list())
			} else if len(changed) > 0 {
				l.udp.sendRegisters(changed)
			}
			if beats {
				l.udp.sendBeats(l.hosted.list(), record.MsgSkillHeartbeat)
			}
		}
		if l.mdns != nil && (len(changed) > 0 || all) {
			l.mdns.announce(changed, all)
		}
	}
}

// reannounce asks the announce loop to send every registration now
// (debounced to once per second).
func (l *LAN) reannounce() {
	select {
	case l.force <- struct{}{}:
	default:
	}
}

func (l *LAN) goRun(f func(ctx context.Context)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f(l.ctx)
	}()
}

// supervise owns one mechanism's socket: it opens it, serves it until it
// fails or ctx ends, and retries every RetryInterval while it cannot be
// opened. The interfaces are re-read every RetryInterval while it runs.
func (l *LAN) supervise(ctx context.Context, name string, group netip.AddrPort, ttl int, serve func(ctx context.Context, s Socket) error) {
	for {
		s, err := l.net.ListenMulticast(group, l.cfg.Interface, ttl)
		if err != nil {
			l.setDown(name, err.Error())
			if !backoff.Sleep(ctx, l.cfg.RetryInterval) {
				return
			}
			continue
		}
		if !l.setUp(name, s) {
			return
		}
		// serr is written by the reader before it closes done.
		var serr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			serr = serve(ctx, s)
		}()
		t := time.NewTicker(l.cfg.RetryInterval)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				if err := s.Sync(); err != nil {
					_ = s.Close()
					<-done
					serr = err
					break loop
				}
			case <-ctx.Done():
				// Close closes the socket after its goodbyes; wait for
				// the reader to notice.
				<-done
				t.Stop()
				return
			}
		}
		t.Stop()
		_ = s.Close()
		if ctx.Err() != nil {
			return
		}
		l.setDown(name, fmt.Sprintf("socket failed: %v", serr))
		if !backoff.Sleep(ctx, l.cfg.RetryInterval) {
			return
		}
	}
}

func (l *LAN) setUp(name string, s Socket) bool {
	l.mu.Lock()
	if l.closed {
		// Close already closed the sockets it knew of.
		l.mu.Unlock()
		_ = s.Close()
		return false
	}
	m := l.mechs[name]
	was := m.state
	m.sock, m.state = s, ""
	l.mu.Unlock()
	l.count(name, "socket_up")
	if was != "not started" {
		l.log.Info("LAN multicast available again", "mechanism", name)
	} else {
		l.log.Debug("LAN multicast socket open", "mechanism", name, "interface", l.cfg.Interface)
	}
	// A socket that comes up (at start or after an outage) advertises
	// everything at once.
	l.reannounce()
	if name == mechMDNS {
		l.mdns.onUp()
	}
	return true
}

func (l *LAN) setDown(name, why string) {
	l.mu.Lock()
	m := l.mechs[name]
	m.sock, m.state = nil, why
	first := !m.logged
	m.logged = true
	l.mu.Unlock()
	l.count(name, "socket_down")
	if first {
		l.log.Warn("LAN multicast unavailable; continuing without it and retrying periodically",
			"mechanism", name, "reason", why, "retry", l.cfg.RetryInterval)
	} else {
		l.log.Debug("LAN multicast still unavailable", "mechanism", name, "reason", why)
	}
}

// sock returns the open socket of a mechanism, or nil.
func (l *LAN) sock(name string) Socket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.mechs[name]; m != nil {
		return m.sock
	}
	return nil
}

// Available reports whether LAN discovery works: true when at least one
// enabled mechanism has its socket open. The reason names every mechanism
// that is down, and why ("disabled by configuration" when both are off).
func (l *LAN) Available() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mechs) == 0 {
		return false, "disabled by configuration"
	}
	if l.closed {
		return false, "closed"
	}
	up := false
	var why []string
	for _, name := range []string{mechUDP, mechMDNS} {
		m := l.mechs[name]
		if m == nil {
			continue
		}
		if m.state == "" {
			up = true
			continue
		}
		why = append(why, name+": "+m.state)
	}
	return up, strings.Join(why, "; ")
}

// Refresh re-reads the hosted records and re-advertises them now: a
// SKILL_REGISTER per skill and the mDNS TXT summaries. Call it when the
// hosted records change.
func (l *LAN) Refresh() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Unregister announces that a hosted agent leaves: SKILL_UNREGISTER for
// each of its skills (signed, sent twice 100 ms apart, as UDP may drop
// one) and an mDNS goodbye for its instance. The agent is no longer
// advertised, even if Locals still returns it.
func (l *LAN) Unregister(ctx context.Context, agentID string, reason record.UnregisterReason) {
	if !reason.Valid() {
		reason = record.ReasonShutdown
	}
	h := l.hosted.remove(agentID)
	if h == nil {
		return
	}
	if l.udp != nil {
		l.udp.unregister(ctx, []*hostedAgent{h}, reason)
	}
	if l.mdns != nil {
		l.mdns.goodbye([]*hostedAgent{h})
	}
}

// SetStatus records a hosted agent's health and announces it at once with
// SKILL_STATUS; the heartbeats carry it from then on.
func (l *LAN) SetStatus(agentID string, st record.Status) {
	if !st.Valid() {
		return
	}
	h := l.hosted.setStatus(agentID, st)
	if h == nil || l.udp == nil {
		return
	}
	l.udp.sendBeats([]*hostedAgent{h}, record.MsgSkillStatus)
}

// Close sends SKILL_UNREGISTER (SHUTDOWN) for the hosted agents and mDNS
// goodbyes, then stops every loop and closes the sockets. It waits for
// the goroutines and is idempotent.
func (l *LAN) Close() error {
	l.mu.Lock()
	first := !l.closed
	l.closed = true
	started := l.started
	p2p := l.p2pmdns
	l.mu.Unlock()
	if first {
		l.close(started, p2p)
	}
	<-l.closeDone
	return nil
}

func (l *LAN) close(started bool, p2p mdns.Service) {
	defer close(l.closeDone)
	if started {
		leaving := l.hosted.removeAll()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if l.udp != nil {
			l.udp.unregister(ctx, leaving, record.ReasonShutdown)
		}
		if l.mdns != nil {
			l.mdns.goodbye(leaving)
			l.mdns.hostGoodbye()
		}
		cancel()
	}
	if p2p != nil {
		_ = p2p.Close()
	}
	l.cancel()
	l.mu.Lock()
	for _, m := range l.mechs {
		if m.sock != nil {
			_ = m.sock.Close()
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *LAN) locals() []*record.SignedAgent {
	if l.d.Locals == nil {
		return nil
	}
	return l.d.Locals()
}

// count increments agentd_lan_packets_total{mechanism, outcome}.
func (l *LAN) count(mechanism, outcome string) {
	if l.m == nil {
		return
	}
	l.m.LANPackets.WithLabelValues(mechanism, outcome).Inc()
}

// reject counts a refused input by reason (agentd_validation_rejects_total
// with transport udp or mdns).
func (l *LAN) reject(mechanism string, reason trust.Reason) {
	l.m.Reject(mechanism, string(reason))
}

// retryBackoff is how long an agent's record is not sought again after
// failures failed attempts in a row: 1 s doubling up to UnknownBackoff,
// each lengthened by up to half at random, so that two daemons that lost
// a dial race to each other do not meet again in step. A first failure is
// often only a dial that lost a race (a TCP simultaneous open, a peer not
// connected yet); a record that really is not to be had is sought again
// at most every UnknownBackoff.
func (l *LAN) retryBackoff(failures int) time.Duration {
	d := backoff.Delay(min(time.Second, l.cfg.UnknownBackoff), l.cfg.UnknownBackoff, failures, 0)
	return d + rand.N(d/2+1)
}

// learn hands a verified record to the node.
func (l *LAN) learn(sa *record.SignedAgent) {
	if l.d.Learn != nil {
		l.d.Learn(sa)
	}
}

func (l *LAN) forget(agentID string) {
	if l.d.Forget != nil {
		l.d.Forget(agentID)
	}
}

// verify runs the trust decision on a record obtained for the LAN.
func (l *LAN) verify(sa *record.SignedAgent, from peer.ID) error {
	return l.d.Verifier.VerifyAgent(sa, trust.VerifyOptions{From: from, Transport: "lan"})
}

// Discover is implemented in discover.go.
var _ interface {
	Discover(ctx context.Context, f store.Filter) ([]*record.SignedAgent, []*record.Agent, error)
	Available() (bool, string)
} = (*LAN)(nil)
