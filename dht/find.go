package dht

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
)

// Fetch asks peer p for its records matching q over RecordProtocol and
// returns those that pass every check: the challenge signature over a
// fresh nonce, trust.Verifier.VerifyAgent with From = p (both record
// signatures, peer binding, expiry, policy, key pin) and the query match.
// Rejected records are counted (m.Reject("dht", reason)) and dropped; if
// none is left the error wraps ErrRejected or ErrNoRecords. FetchTimeout
// bounds the call (dial included) and MaxConcurrentFetch bounds concurrent
// fetches of the node.
func (d *DHT) Fetch(ctx context.Context, p peer.AddrInfo, q FetchQuery) ([]*record.SignedAgent, error) {
	if _, _, err := d.running(); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if p.ID == d.h.ID() {
		return d.localRecords(q), nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.FetchTimeout)
	defer cancel()
	select {
	case d.fetchSem <- struct{}{}:
	case <-ctx.Done():
		d.countFetch("timeout")
		return nil, fmt.Errorf("fetch from %s: waiting for a fetch slot: %w", p.ID, ctx.Err())
	}
	defer func() { <-d.fetchSem }()

	resp, nonce, err := d.roundTrip(ctx, p, q)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			d.countFetch("timeout")
		case errors.Is(err, ErrProtocol), errors.Is(err, ErrFrameTooLarge), errors.Is(err, record.ErrUnsupportedVersion):
			d.countFetch("bad_response")
			d.m.Reject("dht", string(trust.ReasonOf(err)))
		default:
			d.countFetch("error")
		}
		return nil, fmt.Errorf("fetch from %s: %w", p.ID, err)
	}
	if resp.Error != nil {
		d.countFetch("refused")
		return nil, fmt.Errorf("fetch from %s: %w", p.ID, &RemoteError{Code: resp.Error.Code, Message: resp.Error.Message})
	}
	var (
		out     []*record.SignedAgent
		lastErr error
	)
	for i := range resp.Records {
		sa, reason, err := d.checkRecord(&resp.Records[i], nonce, p.ID, q)
		if err != nil {
			d.m.Reject("dht", reason)
			d.log.Debug("fetched record rejected", "peer_id", p.ID, "reason", reason, "err", err)
			lastErr = err
			continue
		}
		out = append(out, sa)
	}
	switch {
	case len(out) > 0:
		d.countFetch("ok")
		return out, nil
	case lastErr != nil:
		d.countFetch("rejected")
		return nil, fmt.Errorf("fetch from %s: %w: %w", p.ID, ErrRejected, lastErr)
	default:
		d.countFetch("empty")
		return nil, fmt.Errorf("fetch from %s: %w", p.ID, ErrNoRecords)
	}
}

// roundTrip opens a stream, sends the request with a fresh nonce and reads
// the response. The stream is reset when ctx ends.
//
// The exchange may run over a relayed (circuit v2, "limited") connection:
// it is one small request and a response of a few KiB (MaxResponseBytes
// bounds it at 256 KiB; a relay with circuit v2's default limits, 128 KiB
// each way and 2 min, resets a larger one), and a provider behind a
// symmetric NAT is reachable no other way. Without the
// allowance go-libp2p would wait for hole punching instead.
func (d *DHT) roundTrip(ctx context.Context, p peer.AddrInfo, q FetchQuery) (*FetchResponse, []byte, error) {
	ctx = network.WithAllowLimitedConn(ctx, "agentd record fetch")
	if len(p.Addrs) > 0 && d.h.Network().Connectedness(p.ID) != network.Connected {
		if err := d.h.Connect(ctx, p); err != nil {
			return nil, nil, fmt.Errorf("dial: %w", err)
		}
	}
	s, err := d.h.NewStream(ctx, p.ID, RecordProtocol)
	if err != nil {
		return nil, nil, fmt.Errorf("open stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	nonce := make([]byte, NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		_ = s.Reset()
		return nil, nil, fmt.Errorf("nonce: %w", err)
	}
	req, err := json.Marshal(FetchRequest{
		ProtocolVersion: record.ProtocolVersion,
		Nonce:           base64.StdEncoding.EncodeToString(nonce),
		AgentID:         q.AgentID, Skill: q.Skill, Capability: q.Capability,
	})
	if err != nil {
		_ = s.Reset()
		return nil, nil, err
	}
	// No CloseWrite: the provider reads exactly one frame, and a half-close
	// adds nothing (on mocknet it would even skip the link latency).
	if err := WriteFrame(s, req); err != nil {
		_ = s.Reset()
		return nil, nil, fmt.Errorf("send request: %w", err)
	}
	body, err := ReadFrame(s, MaxResponseBytes)
	if err != nil {
		_ = s.Reset()
		return nil, nil, fmt.Errorf("read response: %w", err)
	}
	_ = s.Close()
	resp, err := ParseResponse(body)
	if err != nil {
		return nil, nil, err
	}
	return resp, nonce, nil
}

// checkRecord verifies one fetched record and returns it or the rejection
// reason.
func (d *DHT) checkRecord(fr *FetchedRecord, nonce []byte, from peer.ID, q FetchQuery) (*record.SignedAgent, string, error) {
	sa, _, err := record.ParseAnnounce(fr.Announce)
	if err != nil {
		return nil, string(trust.ReasonOf(err)), err
	}
	if sa.Agent.PeerID != from.String() {
		return nil, string(trust.ReasonPeerMismatch), fmt.Errorf("record names peer %s but was served by %s", sa.Agent.PeerID, from)
	}
	sig, err := record.DecodeBase64(fr.ChallengeSignature)
	if err != nil {
		return nil, ReasonBadChallenge, fmt.Errorf("%w: %v", ErrBadChallenge, err)
	}
	msg := ChallengeBytes(nonce, d.h.ID(), from, sa.Canonical())
	switch fr.Signer {
	case SignerAgent:
		pub, err := sa.AgentPublicKey()
		if err != nil {
			return nil, string(trust.ReasonMalformed), err
		}
		if !record.VerifyBytes(pub, msg, sig) {
			return nil, ReasonBadChallenge, fmt.Errorf("%w: agent key", ErrBadChallenge)
		}
	case SignerPeer:
		pub, err := d.peerKey(from)
		if err != nil {
			return nil, ReasonBadChallenge, fmt.Errorf("%w: %v", ErrBadChallenge, err)
		}
		if ok, err := pub.Verify(msg, sig); err != nil || !ok {
			return nil, ReasonBadChallenge, fmt.Errorf("%w: peer key", ErrBadChallenge)
		}
	default:
		return nil, ReasonBadChallenge, fmt.Errorf("%w: unknown signer %q", ErrBadChallenge, fr.Signer)
	}
	if err := d.v.VerifyAgent(sa, trust.VerifyOptions{From: from, Transport: "dht"}); err != nil {
		return nil, string(trust.ReasonOf(err)), err
	}
	if !q.Matches(&sa.Agent) {
		return nil, ReasonNotOffered, fmt.Errorf("record of agent %s does not match skill %q capability %q agent %q", sa.Agent.AgentID, q.Skill, q.Capability, q.AgentID)
	}
	return sa, "", nil
}

func (d *DHT) peerKey(p peer.ID) (crypto.PubKey, error) {
	if k, err := p.ExtractPublicKey(); err == nil {
		return k, nil
	}
	if k := d.h.Peerstore().PubKey(p); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("no public key known for peer %s", p)
}

// localRecords returns this node's hosted records matching q.
func (d *DHT) localRecords(q FetchQuery) []*record.SignedAgent {
	var out []*record.SignedAgent
	for _, sa := range d.hosted.HostedRecords(q) {
		if sa != nil && q.Matches(&sa.Agent) {
			out = append(out, sa)
		}
	}
	return out
}

// Find looks skill/capability up in the DHT: FindProviders on the most
// specific key (record.QueryKey), then for each of at most MaxProviders
// providers either the live view's records (Config.Live) or a fetch. Only
// verified records that offer skill and capability are returned, at most
// limit (≤ 0: no limit beyond the providers' answers), one per agent id
// (the highest seq). Providers whose fetch fails are dropped and counted.
// QueryTimeout bounds the call. An empty result with a nil error means
// nothing was found; when the deadline passes before anything was found
// the error wraps context.DeadlineExceeded.
func (d *DHT) Find(ctx context.Context, skill, capability string, limit int) ([]Found, error) {
	kad, _, err := d.running()
	if err != nil {
		return nil, err
	}
	q := FetchQuery{Skill: skill, Capability: capability}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	key, ok := record.QueryKey(skill, capability)
	if !ok {
		return nil, ErrEmptyQuery
	}
	if limit <= 0 {
		limit = d.cfg.MaxProviders * MaxRecordsPerResponse
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.QueryTimeout)
	defer cancel()

	provs := kad.FindProvidersAsync(ctx, key.CID(), d.cfg.MaxProviders)
	results := make(chan []Found)
	var (
		pending int
		seen    = map[peer.ID]bool{}
		byAgent = map[string]int{}
		out     []Found
	)
	add := func(fs []Found) {
		for _, f := range fs {
			if i, ok := byAgent[f.Record.Agent.AgentID]; ok {
				if f.Record.Agent.Seq > out[i].Record.Agent.Seq {
					out[i] = f
				}
				continue
			}
			if len(out) < limit {
				byAgent[f.Record.Agent.AgentID] = len(out)
				out = append(out, f)
			}
		}
	}
loop:
	for provs != nil || pending > 0 {
		select {
		case p, ok := <-provs:
			if !ok {
				provs = nil
				continue
			}
			if seen[p.ID] || len(seen) >= d.cfg.MaxProviders {
				continue
			}
			seen[p.ID] = true
			if p.ID == d.h.ID() {
				add(foundFrom(d.localRecords(q), p.ID, false, 0))
			} else if live := d.liveRecords(p.ID, q); len(live) > 0 {
				add(foundFrom(live, p.ID, false, 0))
			} else {
				pending++
				go func() {
					start := time.Now()
					recs, err := d.Fetch(ctx, p, q)
					var fs []Found
					if err != nil {
						d.log.Debug("dht provider dropped", "peer_id", p.ID, "key", key.String(), "err", err)
					} else {
						fs = foundFrom(recs, p.ID, true, time.Since(start))
					}
					// results is read until pending reaches zero.
					results <- fs
				}()
			}
		case fs := <-results:
			pending--
			add(fs)
		case <-ctx.Done():
			break loop
		}
		if len(out) >= limit {
			break
		}
	}
	ended := ctx.Err() // before our own cancel below
	cancel()
	for pending > 0 {
		<-results
		pending--
	}
	if provs != nil {
		for range provs {
		}
	}
	if len(out) == 0 && ended != nil {
		return nil, fmt.Errorf("dht find %s: %w", key.String(), ended)
	}
	return out, nil
}

func (d *DHT) liveRecords(p peer.ID, q FetchQuery) []*record.SignedAgent {
	if d.cfg.Live == nil {
		return nil
	}
	var out []*record.SignedAgent
	for _, sa := range d.cfg.Live(p) {
		if sa != nil && sa.Agent.PeerID == p.String() && q.Matches(&sa.Agent) {
			out = append(out, sa)
		}
	}
	return out
}

func foundFrom(recs []*record.SignedAgent, p peer.ID, fetched bool, lat time.Duration) []Found {
	out := make([]Found, 0, len(recs))
	for _, r := range recs {
		out = append(out, Found{Record: r, Provider: p, Fetched: fetched, Latency: lat})
	}
	return out
}

// GetRecord reads the record stored as a DHT value under /agentd/<id>,
// where id is a peer id or an agent id, and verifies it through the
// trust.Verifier. It answers for agents this node has no connection to.
func (d *DHT) GetRecord(ctx context.Context, id string) (*record.SignedAgent, error) {
	kad, _, err := d.running()
	if err != nil {
		return nil, err
	}
	var key string
	if record.ValidateAgentID(id) == nil {
		key = ValueKey(id)
	} else if p, perr := peer.Decode(id); perr == nil {
		key = ValueKey(p.String())
	} else {
		return nil, &record.FieldError{Field: "id", Reason: fmt.Sprintf("%q is neither an agent id (UUIDv4) nor a peer id", truncate(id))}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.QueryTimeout)
	defer cancel()
	val, err := kad.GetValue(ctx, key)
	if err != nil {
		if errors.Is(err, routing.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		if val == nil {
			return nil, fmt.Errorf("dht get %s: %w", key, err)
		}
		// The deadline passed after a value was found: use it.
	}
	sa, err := d.val.validate(key, val)
	if err != nil {
		d.m.Reject("dht", string(trust.ReasonOf(err)))
		return nil, fmt.Errorf("dht value %s: %w", key, err)
	}
	if err := d.v.VerifyAgent(sa, trust.VerifyOptions{Transport: "dht"}); err != nil {
		d.m.Reject("dht", string(trust.ReasonOf(err)))
		return nil, fmt.Errorf("dht value %s: %w", key, err)
	}
	return sa, nil
}

func (d *DHT) countFetch(outcome string) {
	if d.m == nil {
		return
	}
	d.m.Fetches.WithLabelValues(outcome).Inc()
}

// FindPeer looks a peer's addresses up in the DHT.
func (d *DHT) FindPeer(ctx context.Context, p peer.ID) (peer.AddrInfo, error) {
	kad, _, err := d.running()
	if err != nil {
		return peer.AddrInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.QueryTimeout)
	defer cancel()
	return kad.FindPeer(ctx, p)
}
