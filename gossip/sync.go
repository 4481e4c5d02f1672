package gossip

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/frame"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Sync wire limits.
const (
	// maxSyncRequestBytes bounds a request frame: room for maxSyncShards
	// shards.
	maxSyncRequestBytes = 10 * 1024
	// syncRecordAllowance is the room one record may take in an answer:
	// the canonical agent object plus its two base64 signatures and JSON
	// punctuation.
	syncRecordAllowance = record.MaxAgentBytes + 1024
	// syncFrameOverhead is the room for the rest of an answer.
	syncFrameOverhead = 4096
	// maxLimiters bounds the per-peer rate limiter table.
	maxLimiters = 4096
)

// ErrSyncRefused is returned (wrapped, with the code) when a neighbour
// answers a sync request with an error.
var ErrSyncRefused = errors.New("gossip: sync refused")

// syncRequest is the request of /agentd/sync/1.0.0 and 1.1.0. Shards
// (1.1.0; a 1.0.0 responder ignores the member) asks only for agents with
// a capability in one of them; absent or empty, it asks for the whole
// view.
type syncRequest struct {
	ProtocolVersion string   `json:"protocol_version"`
	Limit           int      `json:"limit"`
	Shards          []string `json:"shards,omitempty"`
}

// syncResponse is the answer: records, each with what the responder
// knows of its liveness (heard[i] belongs to records[i]), or an error.
type syncResponse struct {
	ProtocolVersion string            `json:"protocol_version"`
	Records         []record.Announce `json:"records"`
	Heard           []syncHeard       `json:"heard"`
	Error           *syncError        `json:"error,omitempty"`
}

// syncHeard is the wire form of Heard.
type syncHeard struct {
	AgeMS      int64 `json:"age_ms"`
	IntervalMS int64 `json:"interval_ms"`
}

// maxHeardMS bounds age_ms and interval_ms (one day): a live view never
// holds an agent silent for longer.
const maxHeardMS = 24 * 60 * 60 * 1000

type syncError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// syncAnswerBound is the largest answer a requester asking for limit
// records accepts.
func syncAnswerBound(limit int) int { return limit*syncRecordAllowance + syncFrameOverhead }

// writeFrame and readFrame are the stream protocols' one framing
// (internal/frame): an unsigned-varint length, then the body.
func writeFrame(w io.Writer, b []byte) error { return frame.Write(w, b) }

func readFrame(r *bufio.Reader, max int) ([]byte, error) { return frame.Read(r, max) }

// checkFrame applies the checks every JSON frame of agentd's stream
// protocols starts with: at most max bytes, I-JSON (record.CanonicalizeJSON:
// UTF-8, no duplicate names, numbers within doubles), a protocol_version
// this version speaks, and no member that differs from one of members
// only in case. what names the frame in the size error.
func checkFrame(b []byte, max int, what string, members []string) error {
	if len(b) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", record.ErrTooLarge, what, len(b), max)
	}
	if _, err := record.CanonicalizeJSON(b); err != nil {
		return err
	}
	if _, _, err := readVersion(b); err != nil {
		return err
	}
	return exactMembers(b, "", members)
}

// decodeSyncRequest parses and checks a request frame. An unsupported
// major version yields record.ErrUnsupportedVersion.
func decodeSyncRequest(b []byte) (*syncRequest, error) {
	if err := checkFrame(b, maxSyncRequestBytes, "sync request", syncReqMembers); err != nil {
		return nil, err
	}
	var r syncRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &record.FieldError{Field: "limit", Reason: "must be an integer: " + err.Error()}
	}
	if r.Limit < 0 || r.Limit > maxSyncLimit {
		return nil, &record.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 0 and %d", maxSyncLimit)}
	}
	if len(r.Shards) > maxSyncShards {
		return nil, &record.FieldError{Field: "shards", Reason: fmt.Sprintf("has %d entries, limit %d", len(r.Shards), maxSyncShards)}
	}
	for _, sh := range r.Shards {
		if !record.ValidShard(sh) {
			return nil, &record.FieldError{Field: "shards[]", Reason: fmt.Sprintf("%q is not 4 lowercase hex digits", record.Truncate(sh, 16))}
		}
	}
	return &r, nil
}

// decodeSyncResponse parses an answer frame to a request for limit
// records. The records are decoded (versions negotiated, fields
// validated) but not verified; heard must hold one entry per record. A
// record that fails to decode is dropped and counted in bad; an error
// answer yields ErrSyncRefused. memo, if not nil, answers for the records
// it has decoded before.
func decodeSyncResponse(b []byte, limit int, memo *recordMemo) (recs []LiveRecord, bad int, err error) {
	if len(b) > syncAnswerBound(limit) {
		return nil, 0, fmt.Errorf("%w: sync answer is %d bytes, limit %d", record.ErrTooLarge, len(b), syncAnswerBound(limit))
	}
	if _, _, err := readVersion(b); err != nil {
		return nil, 0, err
	}
	var r struct {
		Records []json.RawMessage `json:"records"`
		Heard   []json.RawMessage `json:"heard"`
		Error   *syncError        `json:"error"`
	}
	if err := exactMembers(b, "", syncRespMembers); err != nil {
		return nil, 0, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, 0, &record.FieldError{Field: "records", Reason: err.Error()}
	}
	if r.Error != nil {
		return nil, 0, fmt.Errorf("%w: %s: %s", ErrSyncRefused, record.Truncate(r.Error.Code, 64), record.Truncate(r.Error.Message, 256))
	}
	if len(r.Records) > limit {
		return nil, 0, &record.FieldError{Field: "records", Reason: fmt.Sprintf("has %d records, %d were asked for", len(r.Records), limit)}
	}
	if len(r.Heard) != len(r.Records) {
		return nil, 0, &record.FieldError{Field: "heard", Reason: fmt.Sprintf("has %d entries for %d records", len(r.Heard), len(r.Records))}
	}
	for i, raw := range r.Records {
		h, err := decodeHeard(r.Heard[i])
		if err != nil {
			return nil, 0, err
		}
		sa, err := memo.decode(raw)
		if err != nil {
			bad++
			continue
		}
		recs = append(recs, LiveRecord{Record: sa, Heard: h})
	}
	return recs, bad, nil
}

// decodeHeard parses one entry of an answer's heard list.
func decodeHeard(raw []byte) (Heard, error) {
	if err := exactMembers(raw, "heard[]", heardMembers); err != nil {
		return Heard{}, err
	}
	var h struct {
		AgeMS      *int64 `json:"age_ms"`
		IntervalMS *int64 `json:"interval_ms"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return Heard{}, &record.FieldError{Field: "heard[]", Reason: "must be an object of integers age_ms and interval_ms: " + err.Error()}
	}
	if h.AgeMS == nil || h.IntervalMS == nil {
		return Heard{}, &record.FieldError{Field: "heard[]", Reason: "age_ms and interval_ms are required"}
	}
	for name, v := range map[string]int64{"age_ms": *h.AgeMS, "interval_ms": *h.IntervalMS} {
		if v < 0 || v > maxHeardMS {
			return Heard{}, &record.FieldError{Field: "heard[]." + name, Reason: fmt.Sprintf("%d is not between 0 and %d", v, maxHeardMS)}
		}
	}
	return Heard{Age: time.Duration(*h.AgeMS) * time.Millisecond, Interval: time.Duration(*h.IntervalMS) * time.Millisecond}, nil
}

// decodeAnnounce parses one record of a sync answer.
func decodeAnnounce(raw []byte) (*record.SignedAgent, error) {
	if len(raw) > syncRecordAllowance {
		return nil, fmt.Errorf("%w: record is %d bytes", record.ErrTooLarge, len(raw))
	}
	if err := exactMembers(raw, "records[]", announceMembers); err != nil {
		return nil, err
	}
	var a record.Announce
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, &record.FieldError{Field: "records[]", Reason: err.Error()}
	}
	if a.ProtocolVersion == "" {
		a.ProtocolVersion = record.ProtocolVersion
	}
	if _, err := record.CheckVersion(a.ProtocolVersion); err != nil {
		return nil, err
	}
	return record.FromAnnounce(a)
}

func encodeSyncError(code, msg string) []byte {
	b, _ := json.Marshal(syncResponse{ProtocolVersion: record.ProtocolVersion, Records: []record.Announce{}, Heard: []syncHeard{}, Error: &syncError{Code: code, Message: msg}})
	return b
}

// handleSync serves one sync request: rate-limited per peer, bounded in
// concurrency, size and time.
func (g *Gossip) handleSync(s network.Stream) {
	if !g.enter() {
		_ = s.Reset()
		return
	}
	defer g.wg.Done()
	remote := s.Conn().RemotePeer()
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.SyncTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(g.cfg.SyncTimeout))

	answer := func(b []byte, outcome string) {
		if outcome == "busy" || outcome == "rate_limited" {
			g.m.Reject("sync", outcome) // a malformed request is counted by its reason
		}
		if err := answerStream(s, b); err != nil {
			g.log.Debug("sync answer failed", "peer_id", remote, "err", err)
		}
	}
	var r *syncRequest
	release, ok := g.admit(s, requestAdmission{
		name: "sync", what: "sync requests", slots: g.serveSem, limits: g.syncLimits,
		readBuf: 256, maxBytes: maxSyncRequestBytes, refuse: encodeSyncError, answer: answer,
	}, func(req []byte) (err error) {
		r, err = decodeSyncRequest(req)
		return err
	})
	if !ok {
		return
	}
	defer release()
	limit := r.Limit
	if limit <= 0 || limit > g.cfg.SyncLimit {
		limit = g.cfg.SyncLimit
	}
	recs := g.sink.LiveRecords(limit, inShards(r.Shards))
	n := min(len(recs), limit)
	resp := syncResponse{ProtocolVersion: record.ProtocolVersion, Records: make([]record.Announce, 0, n), Heard: make([]syncHeard, 0, n)}
	for _, lr := range recs {
		if len(resp.Records) >= limit {
			break
		}
		sa := lr.Record
		if sa == nil {
			continue
		}
		a := sa.Announce()
		if len(a.Agent) == 0 || len(a.Agent) > record.MaxAgentBytes {
			continue
		}
		resp.Records = append(resp.Records, a)
		resp.Heard = append(resp.Heard, syncHeard{
			AgeMS:      min(max(lr.Heard.Age.Milliseconds(), 0), maxHeardMS),
			IntervalMS: min(max(lr.Heard.Interval.Milliseconds(), 0), maxHeardMS),
		})
	}
	b, err := json.Marshal(resp)
	if err != nil {
		g.log.Warn("sync answer encoding failed", "err", err)
		_ = s.Reset()
		return
	}
	answer(b, "ok")
	g.log.Debug("sync served", "peer_id", remote, "records", len(resp.Records))
}

// Sync asks up to Config.SyncPeers neighbours (announce-topic peers first,
// then other connected peers) for their live view, verifies every record
// with the Verifier (no peer binding: a relayed record is self-certifying
// through its peer signature), and hands the records that are news
// (Sink.CheckAnnounce) to Sink.Synced with from set to the record's peer
// and the freshest liveness the neighbours report for it. It returns how many records were news. It
// fails with ErrNoPeers when no peer is connected, and with the joined
// errors when no neighbour answered.
func (g *Gossip) Sync(ctx context.Context) (int, error) {
	if g.ctx.Err() != nil {
		return 0, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()

	var shards []string
	if g.cfg.Scoped {
		shards = g.Shards()
		if len(shards) == 0 {
			return 0, nil // no interest: nothing to ask for
		}
	}
	peers := g.syncCandidates()
	if len(peers) == 0 {
		return 0, ErrNoPeers
	}
	results := make([][]LiveRecord, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() { results[i], errs[i] = g.fetchLive(ctx, p, shards) })
	}
	wg.Wait()
	var answers [][]LiveRecord
	for i, recs := range results {
		if errs[i] != nil {
			g.log.Debug("sync with peer failed", "peer_id", peers[i], "err", errs[i])
			continue
		}
		answers = append(answers, recs)
	}
	if len(answers) == 0 {
		return 0, fmt.Errorf("gossip: sync: no neighbour answered: %w", errors.Join(errs...))
	}
	news := g.absorb(answers)
	g.log.Debug("sync done", "peers", len(peers), "answered", len(answers), "new_records", news)
	return news, nil
}

// absorb merges sync answers, verifies every record and hands the news
// to the sink; it returns how many records were news.
func (g *Gossip) absorb(answers [][]LiveRecord) int {
	// One record may come from several neighbours: keep the freshest
	// liveness any of them reports, in the order first received.
	self := g.h.ID().String()
	index := map[[32]byte]int{}
	var merged []LiveRecord
	for _, recs := range answers {
		for _, lr := range recs {
			if lr.Record.Agent.PeerID == self {
				continue
			}
			h := lr.Record.Hash()
			if j, ok := index[h]; ok {
				if lr.Heard.Age < merged[j].Heard.Age {
					merged[j].Heard = lr.Heard
				}
				continue
			}
			index[h] = len(merged)
			merged = append(merged, lr)
		}
	}
	news := 0
	for _, lr := range merged {
		sa := lr.Record
		if err := g.v.VerifyAgent(sa, trust.VerifyOptions{Transport: "sync"}); err != nil {
			g.m.Reject("sync", string(verifyReason(err)))
			continue
		}
		if err := g.sink.CheckAnnounce(sa); err != nil {
			continue
		}
		pid, err := peer.Decode(sa.Agent.PeerID)
		if err != nil {
			continue // validated by record; unreachable
		}
		g.sink.Synced(sa, pid, lr.Heard)
		news++
	}
	return news
}

// syncCandidates picks up to SyncPeers neighbours: announce-topic peers,
// then connected peers known to speak SyncProtocol, then other connected
// peers (identify may not have finished), each group shuffled.
func (g *Gossip) syncCandidates() []peer.ID {
	want := g.cfg.SyncPeers
	var out []peer.ID
	taken := map[peer.ID]bool{g.h.ID(): true}
	add := func(ps []peer.ID) {
		rand.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		for _, p := range ps {
			if len(out) >= want {
				return
			}
			if !taken[p] {
				taken[p] = true
				out = append(out, p)
			}
		}
	}
	add(g.TopicPeers())
	for _, sh := range g.Shards() {
		add(g.ShardPeers(sh))
	}
	var speaks, others []peer.ID
	for _, p := range g.h.Network().Peers() {
		if taken[p] {
			continue
		}
		if ok, err := g.h.Peerstore().SupportsProtocols(p, protocol.ID(SyncProtocol)); err == nil && len(ok) > 0 {
			speaks = append(speaks, p)
		} else {
			others = append(others, p)
		}
	}
	add(speaks)
	add(others)
	return out
}

// fetchLive runs one sync exchange with p for shards (nil: everything).
// A peer that serves only SyncProtocol answers its whole view; the answer
// is filtered here either way.
func (g *Gossip) fetchLive(ctx context.Context, p peer.ID, shards []string) ([]LiveRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.SyncTimeout)
	defer cancel()
	s, err := g.h.NewStream(ctx, p, protocol.ID(TrailSyncProtocol), protocol.ID(ScopedSyncProtocol), protocol.ID(SyncProtocol))
	if err != nil {
		return nil, fmt.Errorf("open sync stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(g.cfg.SyncTimeout))
	limit := g.cfg.SyncLimit
	sr := syncRequest{ProtocolVersion: record.ProtocolVersion, Limit: limit}
	if s.Protocol() != protocol.ID(SyncProtocol) {
		sr.Shards = shards
	}
	req, err := json.Marshal(sr)
	if err != nil {
		_ = s.Reset()
		return nil, err
	}
	if err := writeFrame(s, req); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("send sync request: %w", err)
	}
	_ = s.CloseWrite()
	b, err := readFrame(bufio.NewReader(s), syncAnswerBound(limit))
	if err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read sync answer: %w", ctx.Err())
		}
		if errors.Is(err, record.ErrTooLarge) || errors.Is(err, record.ErrMalformed) {
			g.m.Reject("sync", string(trust.ReasonOf(err)))
		}
		return nil, fmt.Errorf("read sync answer: %w", err)
	}
	_ = s.Close()
	recs, bad, err := decodeSyncResponse(b, limit, g.synced)
	if err != nil {
		// A refusal (ErrSyncRefused: busy, rate limited) is the
		// neighbour's right; a malformed answer is counted against it.
		if !errors.Is(err, ErrSyncRefused) {
			g.m.Reject("sync", string(trust.ReasonOf(err)))
		}
		return nil, err
	}
	if bad > 0 {
		if g.m != nil {
			g.m.Rejects.WithLabelValues("sync", string(trust.ReasonMalformed)).Add(float64(bad))
		}
		g.log.Debug("sync answer carried undecodable records", "peer_id", p, "count", bad)
	}
	if keep := inShards(shards); keep != nil {
		recs = slices.DeleteFunc(recs, func(lr LiveRecord) bool { return !keep(&lr.Record.Agent) })
	}
	return recs, nil
}

// inShards returns a filter of the agents with a capability in one of
// shards, or nil (everything) when shards is empty.
func inShards(shards []string) func(*record.Agent) bool {
	if len(shards) == 0 {
		return nil
	}
	want := make(map[string]bool, len(shards))
	for _, sh := range shards {
		want[sh] = true
	}
	return func(a *record.Agent) bool { return a.InShards(want) }
}
