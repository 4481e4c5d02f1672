package dht

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// maxLimiterPeers bounds the per-peer limiter table; when it is full and
// nothing idle can be pruned, new peers are refused.
const maxLimiterPeers = 4096

// peerLimiter is a token bucket per remote peer.
type peerLimiter struct {
	r     rate.Limit
	burst int
	mu    sync.Mutex
	m     map[peer.ID]*limEntry
}

type limEntry struct {
	lim  *rate.Limiter
	last time.Time
}

func newPeerLimiter(r rate.Limit, burst int) *peerLimiter {
	return &peerLimiter{r: r, burst: burst, m: map[peer.ID]*limEntry{}}
}

func (l *peerLimiter) allow(p peer.ID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[p]
	if !ok {
		if len(l.m) >= maxLimiterPeers {
			l.pruneLocked(now)
			if len(l.m) >= maxLimiterPeers {
				return false
			}
		}
		e = &limEntry{lim: rate.NewLimiter(l.r, l.burst)}
		l.m[p] = e
	}
	e.last = now
	return e.lim.AllowN(now, 1)
}

// prune forgets peers idle long enough for their bucket to be full again.
func (l *peerLimiter) prune(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(now)
}

func (l *peerLimiter) pruneLocked(now time.Time) {
	idle := time.Minute
	if l.r > 0 {
		if refill := time.Duration(float64(l.burst) / float64(l.r) * float64(time.Second)); refill > idle {
			idle = refill
		}
	}
	for p, e := range l.m {
		if now.Sub(e.last) > idle {
			delete(l.m, p)
		}
	}
}

// serveEnter admits one served stream, or reports false when closed or at
// the concurrency bound.
func (d *DHT) serveEnter() bool {
	d.serveMu.Lock()
	defer d.serveMu.Unlock()
	if d.serveClosed || d.serving >= d.cfg.ServeMaxConcurrent {
		return false
	}
	d.serving++
	d.serveWG.Add(1)
	return true
}

func (d *DHT) serveExit() {
	d.serveMu.Lock()
	d.serving--
	d.serveMu.Unlock()
	d.serveWG.Done()
}

// handleStream serves one record fetch. Every step is bounded: a watchdog
// resets the stream after ServeTimeout (mocknet streams ignore deadlines,
// real ones get the deadline too), the request frame is at most
// MaxRequestBytes, the response at most MaxResponseBytes.
func (d *DHT) handleStream(s network.Stream) {
	if !d.serveEnter() {
		d.countServe("busy")
		_ = s.Reset()
		return
	}
	defer d.serveExit()
	watchdog := time.AfterFunc(d.cfg.ServeTimeout, func() { _ = s.Reset() })
	defer watchdog.Stop()
	_ = s.SetDeadline(time.Now().Add(d.cfg.ServeTimeout))

	remote := s.Conn().RemotePeer()
	// The request is read before the rate limit is applied, even though a
	// refused one is not used: closing a stream whose request is still in
	// flight makes the muxer reset it when the request arrives, and the
	// reset can overtake the answer, so the client saw "stream reset"
	// instead of ErrRateLimited (a ~1-in-40 failure of
	// TestHandlerRateLimitAndConcurrencyBound). The read is bounded by
	// MaxRequestBytes and the serve deadline.
	body, err := ReadFrame(s, MaxRequestBytes)
	if !d.limiter.allow(remote, time.Now()) {
		d.countServe("rate_limited")
		if err != nil {
			_ = s.Reset()
			return
		}
		d.replyError(s, record.CodeRateLimited, "too many record fetches from this peer; retry later")
		return
	}
	if err != nil {
		d.countServe("bad_request")
		d.log.Debug("record fetch request unreadable", "peer_id", remote, "err", err)
		if errors.Is(err, ErrFrameTooLarge) {
			d.replyError(s, record.CodeRequestTooLarge, err.Error())
			return
		}
		_ = s.Reset()
		return
	}
	req, nonce, err := ParseRequest(body)
	if err != nil {
		d.countServe("bad_request")
		code := record.CodeMalformedPayload
		if errors.Is(err, record.ErrUnsupportedVersion) {
			code = record.CodeUnsupportedVersion
		}
		d.replyError(s, code, err.Error())
		return
	}
	resp := d.answer(req, nonce, remote)
	b, err := json.Marshal(resp)
	if err != nil {
		d.countServe("error")
		d.log.Warn("record fetch response does not marshal", "err", err)
		_ = s.Reset()
		return
	}
	if err := WriteFrame(s, b); err != nil {
		d.countServe("write_error")
		_ = s.Reset()
		return
	}
	d.countServe("served")
	_ = s.Close()
}

// answer builds the response: the hosted records bound to this host that
// match the request, each with its challenge signature, within the record
// and byte limits.
func (d *DHT) answer(req *FetchRequest, nonce []byte, requester peer.ID) FetchResponse {
	q := req.Query()
	self := d.h.ID()
	resp := FetchResponse{ProtocolVersion: record.ProtocolVersion, Records: []FetchedRecord{}}
	size := 256 // envelope and separators, generously
	for _, sa := range d.hosted.HostedRecords(q) {
		if len(resp.Records) == MaxRecordsPerResponse {
			break
		}
		if sa == nil || sa.Agent.PeerID != self.String() || !q.Matches(&sa.Agent) {
			continue
		}
		msg := ChallengeBytes(nonce, requester, self, sa.Canonical())
		signer := SignerAgent
		sig, ok, err := d.hosted.SignChallenge(sa.Agent.AgentID, msg)
		if err != nil {
			d.log.Warn("challenge signing failed", "agent_id", sa.Agent.AgentID, "err", err)
			continue
		}
		if !ok {
			signer = SignerPeer
			sig, err = d.priv.Sign(msg)
			if err != nil {
				d.log.Warn("challenge signing with the peer key failed", "err", err)
				continue
			}
		}
		fr := FetchedRecord{
			Announce:           sa.MarshalAnnounce(),
			Signer:             signer,
			ChallengeSignature: base64.StdEncoding.EncodeToString(sig),
		}
		n := len(fr.Announce) + len(fr.ChallengeSignature) + 64
		if size+n > MaxResponseBytes {
			break
		}
		size += n
		resp.Records = append(resp.Records, fr)
	}
	return resp
}

func (d *DHT) replyError(s network.Stream, code, msg string) {
	if len(msg) > 900 {
		msg = msg[:900] // replacement characters for a cut rune stay under 1024 bytes
	}
	b, err := json.Marshal(FetchResponse{
		ProtocolVersion: record.ProtocolVersion,
		Records:         []FetchedRecord{},
		Error:           &WireError{Code: code, Message: msg},
	})
	if err != nil {
		_ = s.Reset()
		return
	}
	if err := WriteFrame(s, b); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

func (d *DHT) countServe(outcome string) {
	if d.m == nil {
		return
	}
	d.m.Fetches.WithLabelValues(fmt.Sprintf("serve_%s", outcome)).Inc()
}
