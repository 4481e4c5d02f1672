package liveness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/peerlimit"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/multiformats/go-multistream"
)

// ProbeProtocol is the stream protocol of liveness probes: one request
// and one answer per stream, each an unsigned-varint length and that many
// bytes of JSON (see the package doc).
const ProbeProtocol = "/agentd/probe/1.0.0"

// Outcome is what a probe learnt of a peer.
type Outcome int

// Probe outcomes.
const (
	// Alive: a connection to the peer was established (or was open) and
	// the peer answered, or its host answered that it does not speak the
	// probe protocol (an older agentd, alive all the same).
	Alive Outcome = iota
	// Unreachable: no connection within the timeout, or no answer.
	Unreachable
	// Refused: the peer's address answered that nothing listens there
	// (ECONNREFUSED): positive evidence that the process is gone.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Alive:
		return "alive"
	case Refused:
		return "refused"
	}
	return "unreachable"
}

// ping reaches p directly and asks it whether it is itself: the SWIM
// ping. It dials without the swarm's dial backoff (a peer that just lost
// its connection is usually in backoff).
//
// A stream that fails before the deadline is tried once more: the
// connection it rode on may have been closing (when a connection drops,
// both sides suspect each other, and each hangs up the connection its own
// ping dialled), and the retry dials a fresh one.
func ping(ctx context.Context, h host.Host, p peer.ID, timeout time.Duration) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dctx := network.WithForceDirectDial(ctx, "agentd liveness probe")
	for range 2 {
		if err := h.Connect(dctx, h.Peerstore().PeerInfo(p)); err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || tcpRefused(ctx, h, p) {
				return Refused
			}
			return Unreachable
		}
		ok, err := ask(ctx, h, p, p)
		switch {
		case err == nil && ok:
			return Alive
		case errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}):
			// An agentd of an earlier version: its host answered.
			return Alive
		case ctx.Err() != nil:
			return Unreachable
		}
	}
	return Unreachable
}

// refusedProbeTimeout bounds the TCP connects of tcpRefused. A refusal
// comes back within a round trip; the bound is for a starved process (a
// loaded machine, where 500 ms once passed before the refusal was read
// and the lone node's proof was lost to the seed's 30 s timeout) and for
// addresses that drop packets instead of refusing.
const refusedProbeTimeout = 2 * time.Second

// tcpRefused reports whether every TCP address the peerstore holds for p
// (at most 4, connected to at once) refuses a plain TCP connect: nothing
// listens where the peer was, the positive evidence a lone node needs.
// The swarm's own dial error cannot say it: it dials QUIC too, which on a
// closed port waits for the timeout, and then reports only the deadline.
// Only a real swarm's addresses are dialled (a simulated network's are not
// the machine's).
func tcpRefused(ctx context.Context, h host.Host, p peer.ID) bool {
	if _, real := h.Network().(*swarm.Swarm); !real {
		return false
	}
	var addrs []string
	for _, a := range h.Peerstore().Addrs(p) {
		if na, err := manet.ToNetAddr(a); err == nil && na.Network() == "tcp" && len(addrs) < 4 {
			addrs = append(addrs, na.String())
		}
	}
	if len(addrs) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusedProbeTimeout)
	defer cancel()
	refused := make(chan bool, len(addrs))
	for _, addr := range addrs {
		go func() {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				_ = c.Close() // something listens: not proof of anything
			}
			refused <- errors.Is(err, syscall.ECONNREFUSED)
		}()
	}
	all := true
	for range addrs {
		if !<-refused {
			all = false
			cancel() // one address is no proof: the others need not finish
		}
	}
	return all
}

// ask asks helper whether target is reachable (target == helper: a ping),
// over an open connection.
func ask(ctx context.Context, h host.Host, helper, target peer.ID) (bool, error) {
	s, err := h.NewStream(network.WithNoDial(ctx, "liveness probe on an open connection"), helper, ProbeProtocol)
	if err != nil {
		return false, err
	}
	defer func() { _ = s.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	req, err := json.Marshal(probeRequest{ProtocolVersion: record.ProtocolVersion, PeerID: target.String()})
	if err != nil {
		return false, err
	}
	if err := writeFrame(s, req); err != nil {
		_ = s.Reset()
		return false, err
	}
	if err := s.CloseWrite(); err != nil {
		_ = s.Reset()
		return false, err
	}
	b, err := readFrame(bufio.NewReaderSize(s, MaxProbeFrame+8), MaxProbeFrame)
	if err != nil {
		_ = s.Reset()
		return false, err
	}
	return DecodeProbeAnswer(b)
}

// server answers probe requests: a ping about itself at once; about
// another peer, by pinging it (results cached for a short while, so many
// askers cost one dial).
type server struct {
	d   *Detector
	sem chan struct{}

	limits *peerlimit.Table

	mu    sync.Mutex
	cache map[peer.ID]cachedOutcome
}

type cachedOutcome struct {
	o  Outcome
	at time.Time
}

const (
	serveConcurrency = 16
	serveRate        = 5 // requests per second per asker
	serveBurst       = 10
	maxLimiters      = 4096
	cacheFor         = 2 * time.Second
)

func newServer(d *Detector) *server {
	return &server{d: d, sem: make(chan struct{}, serveConcurrency), limits: peerlimit.New(serveRate, serveBurst, maxLimiters), cache: map[peer.ID]cachedOutcome{}}
}

func (sv *server) answer(s network.Stream, a probeAnswer) {
	a.ProtocolVersion = record.ProtocolVersion
	b, err := json.Marshal(a)
	if err == nil {
		err = writeFrame(s, b)
	}
	if err != nil {
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

func (sv *server) refuse(s network.Stream, code, msg string) {
	sv.d.m.Inc(probesServed, "refused")
	sv.answer(s, probeAnswer{Error: &probeError{Code: code, Message: msg}})
}

// handle serves one probe stream.
func (sv *server) handle(s network.Stream) {
	if !sv.d.enter() {
		_ = s.Reset()
		return
	}
	defer sv.d.wg.Done()
	asker := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(sv.d.cfg.AskTimeout))
	// The request is read before any refusal, so the refusal is not
	// overtaken by a reset of the asker's unread write.
	b, err := readFrame(bufio.NewReaderSize(s, MaxProbeFrame+8), MaxProbeFrame)
	if errors.Is(err, record.ErrTooLarge) {
		sv.d.m.Reject("probe", "too_large")
		_ = s.Reset()
		return
	}
	if !sv.limits.Allow(asker) {
		sv.refuse(s, record.CodeRateLimited, "too many probe requests")
		return
	}
	select {
	case sv.sem <- struct{}{}:
		defer func() { <-sv.sem }()
	default:
		sv.refuse(s, record.CodeServiceUnavailable, "too many probes in flight")
		return
	}
	var target peer.ID
	if err == nil {
		target, err = DecodeProbeRequest(b)
	}
	if err != nil {
		sv.d.m.Reject("probe", "malformed")
		sv.refuse(s, record.CodeMalformedPayload, err.Error())
		return
	}
	self := sv.d.h.ID()
	if target == self {
		sv.d.m.Inc(probesServed, "reachable")
		sv.answer(s, probeAnswer{Reachable: true})
		return
	}
	if target == asker {
		sv.refuse(s, record.CodeMalformedPayload, "peer_id: names the asker")
		return
	}
	if sv.d.h.Network().Connectedness(target) != network.Connected && len(sv.d.h.Peerstore().Addrs(target)) == 0 {
		// Never reached, nothing to dial: no answer either way (and no
		// lookup on behalf of whoever asks).
		sv.refuse(s, record.CodeNotFound, "no address known for peer_id")
		return
	}
	o := sv.probe(sv.d.ctx, target)
	if o == Alive {
		sv.d.m.Inc(probesServed, "reachable")
	} else {
		sv.d.m.Inc(probesServed, "unreachable")
	}
	sv.answer(s, probeAnswer{Reachable: o == Alive})
}

// probe pings target, or answers from a ping made within cacheFor.
func (sv *server) probe(ctx context.Context, target peer.ID) Outcome {
	now := time.Now()
	sv.mu.Lock()
	if c, ok := sv.cache[target]; ok && now.Sub(c.at) < cacheFor {
		sv.mu.Unlock()
		return c.o
	}
	sv.mu.Unlock()
	o := sv.d.reach(ctx, target)
	sv.mu.Lock()
	if len(sv.cache) >= maxLimiters {
		for p, c := range sv.cache {
			if now.Sub(c.at) >= cacheFor {
				delete(sv.cache, p)
			}
		}
	}
	sv.cache[target] = cachedOutcome{o: o, at: time.Now()}
	sv.mu.Unlock()
	return o
}
