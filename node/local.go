package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Errors of the local lifecycle.
var (
	// ErrNotHosted is returned for an agent this node does not host.
	ErrNotHosted = errors.New("agent is not registered on this node")
	// ErrForeignKey is returned when a registration names an agent id that
	// is bound to another key (seed 000 ErrDuplicateID).
	ErrForeignKey = errors.New("agent_id is already registered with another key")
	// ErrNotStarted is returned by operations that need a started node.
	ErrNotStarted = errors.New("node is not started")
)

// Register signs an agent with this node's keys and hosts it: it fills the
// identity fields (agent_id defaults to the node's own, peer_id,
// public_key, seq, issued_at, ttl_seconds), stores the registration
// durably, and announces it on every transport. Registering the same
// content again is coalesced (the existing record is returned).
func (n *Node) Register(ctx context.Context, a *record.Agent) (*record.SignedAgent, error) {
	if a.AgentID == "" {
		id, err := n.defaultAgentID(a.AgentName)
		if err != nil {
			return nil, err
		}
		a.AgentID = id
	}
	unlock := n.lockAgent(a.AgentID)
	defer unlock()
	if a.PeerID != "" && a.PeerID != n.id.PeerID.String() {
		return nil, &record.FieldError{Field: "peer_id", Reason: fmt.Sprintf("%s is not this node's peer id %s", a.PeerID, n.id.PeerID)}
	}
	if a.PublicKey != "" && a.PublicKey != n.id.PublicKeyPEM() {
		return nil, &record.FieldError{Field: "public_key", Reason: "an unsigned registration must not carry its own public_key; sign it and send an Announce instead"}
	}
	if cur, ok := n.hostedRecord(a.AgentID); ok && sameContent(&cur.Agent, a) {
		return cur, nil
	}
	seq, err := n.nextRecordSeq(ctx, a.AgentID)
	if err != nil {
		return nil, err
	}
	a.Fill(n.id.AgentID, n.id.PeerID.String(), n.id.PublicKeyPEM(), seq, time.Now(), n.cfg.RecordTTL)
	sa, err := n.id.Sign(a)
	if err != nil {
		return nil, err
	}
	n.ver.NoteSigned(sa)
	return n.host_(ctx, sa)
}

// defaultAgentID chooses the agent_id of an unsigned registration that
// names none. The first agent a node hosts gets the node's own agent_id;
// a registration with the same agent_name is that agent again (an update).
// Another agent_name gets its own stable id, derived from the node's
// agent_id and the name (record.ExternalAgentID("agentd-node:"+node
// agent_id, name)), so that two specs registered on one node are two
// agents and registering either again updates it: a second spec never
// silently replaces the first. A second agent without a name is refused:
// nothing tells it apart from the next one.
func (n *Node) defaultAgentID(name string) (string, error) {
	own := n.id.AgentID
	derived := record.ExternalAgentID("agentd-node:"+own, name)
	if name != "" {
		if _, ok := n.hostedRecord(derived); ok {
			return derived, nil
		}
	}
	cur, ok := n.hostedRecord(own)
	if !ok || cur.Agent.AgentName == name {
		return own, nil
	}
	if name == "" {
		return "", &trust.RejectError{Reason: trust.ReasonKeyMismatch, Detail: fmt.Sprintf(
			"this node already hosts agent %s (%q) under its default agent_id; give this agent an agent_name (it then gets an agent_id of its own) or an agent_id", own, cur.Agent.AgentName)}
	}
	return derived, nil
}

// RegisterSigned hosts a record its agent signed with its own key: the
// record must name this node's peer id, verify, and not be older than what
// is hosted; the node adds its peer signature.
func (n *Node) RegisterSigned(ctx context.Context, sa *record.SignedAgent) (*record.SignedAgent, error) {
	if sa.Agent.PeerID != n.id.PeerID.String() {
		return nil, &record.FieldError{Field: "agent.peer_id", Reason: fmt.Sprintf("%s is not this node's peer id %s", sa.Agent.PeerID, n.id.PeerID)}
	}
	co, err := sa.CoSign(n.id.PeerKey)
	if err != nil {
		return nil, err
	}
	if err := n.ver.VerifyAgent(co, trust.VerifyOptions{Transport: "local"}); err != nil {
		if isForeignKey(err) {
			return nil, fmt.Errorf("%w: %v", ErrForeignKey, err)
		}
		return nil, err
	}
	unlock := n.lockAgent(co.Agent.AgentID)
	defer unlock()
	if cur, ok := n.hostedRecord(co.Agent.AgentID); ok {
		if cur.Agent.Seq == co.Agent.Seq && string(cur.Canonical()) == string(co.Canonical()) {
			return cur, nil
		}
		if co.Agent.Seq <= cur.Agent.Seq {
			return nil, &record.FieldError{Field: "agent.seq", Reason: fmt.Sprintf("%d is not newer than the hosted record's %d", co.Agent.Seq, cur.Agent.Seq)}
		}
	}
	n.noteSeq(co.Agent.AgentID, co.Agent.Seq)
	return n.host_(ctx, co)
}

// host_ stores, applies and announces a signed local record.
func (n *Node) host_(ctx context.Context, sa *record.SignedAgent) (*record.SignedAgent, error) {
	// The node's own signature passes its verifier (and pins its key).
	// The pin is written with the registration, in its transaction.
	done := n.st.DeferPin(sa.Agent.AgentID)
	defer done()
	if err := n.ver.VerifyAgent(sa, trust.VerifyOptions{Transport: "local"}); err != nil {
		if isForeignKey(err) {
			return nil, fmt.Errorf("%w: %v", ErrForeignKey, err)
		}
		return nil, err
	}
	if err := n.st.PutLocal(ctx, sa); err != nil {
		return nil, fmt.Errorf("store registration: %w", err)
	}
	n.view.ApplyLocal(sa)
	n.applyHosted(sa)
	if !n.shardsJoined(sa) {
		n.syncInterest() // join the record's shards before announcing there
	}
	n.announce(ctx, sa)
	// Held for as long as the agent is registered, which on a registry
	// is 100 000 records: keep the agent object, not its bytes as well.
	sa.Compact()
	return sa, nil
}

// announce publishes a hosted record on gossip (unless it is quiet) and
// updates the DHT.
func (n *Node) announce(ctx context.Context, sa *record.SignedAgent) {
	if n.gsp != nil && !n.view.Quiet(sa.Agent.AgentID) {
		if err := n.gsp.PublishAnnounce(ctx, sa); err != nil {
			n.log.Debug("publish announce failed", "agent_id", sa.Agent.AgentID, "err", err)
		}
	}
	if n.dht != nil {
		n.dht.Provide(sa)
	}
	if n.lan != nil {
		n.lan.Refresh()
	}
}

// Unregister stops hosting an agent: it publishes an unregister statement
// with the reason, writes a tombstone, stops providing, and deletes the
// durable registration.
func (n *Node) Unregister(ctx context.Context, agentID string, reason record.UnregisterReason) error {
	if reason == "" {
		reason = record.ReasonShutdown
	}
	if !reason.Valid() {
		return &record.FieldError{Field: "reason", Reason: fmt.Sprintf("%q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", reason)}
	}
	unlock := n.lockAgent(agentID)
	defer unlock()
	if _, ok := n.hostedRecord(agentID); !ok {
		return ErrNotHosted
	}
	if err := n.publishUnregister(ctx, agentID, reason); err != nil {
		n.log.Warn("publish unregister failed", "agent_id", agentID, "err", err)
	}
	if n.lan != nil {
		n.lan.Unregister(ctx, agentID, reason)
	}
	if err := n.st.DeleteLocal(ctx, agentID); err != nil {
		return fmt.Errorf("delete registration: %w", err)
	}
	n.mu.Lock()
	_, leased := n.leases[agentID]
	delete(n.leases, agentID)
	n.dropHostedLocked(agentID)
	delete(n.stale, agentID)
	n.mu.Unlock()
	if leased {
		if err := n.st.PutLease(ctx, agentID, time.Time{}); err != nil {
			n.log.Warn("clear lease failed", "agent_id", agentID, "err", err)
		}
	}
	if promoted := n.view.RemoveLocal(agentID, reason); promoted != "" {
		// A quiet agent takes the gossiped place: signed again and
		// announced in its first heartbeat slot, as its peers never
		// heard of it.
		n.markStale(promoted)
	}
	n.syncInterest()
	if n.dht != nil {
		n.dht.Unprovide(agentID)
	}
	if n.lan != nil {
		n.lan.Refresh()
	}
	return nil
}

func (n *Node) publishUnregister(ctx context.Context, agentID string, reason record.UnregisterReason) error {
	sb, err := n.signBeat(agentID, "", reason)
	if err != nil {
		return err
	}
	if err := n.st.PutTombstone(ctx, store.Tombstone{AgentID: agentID, Seq: sb.Beat.Seq, Reason: reason, At: time.Now()}); err != nil {
		n.log.Warn("tombstone write failed", "agent_id", agentID, "err", err)
	}
	if n.gsp == nil || n.view.Quiet(agentID) {
		return nil // a quiet agent's peers never heard of it on gossip
	}
	return n.gsp.PublishBeat(ctx, gossip.Kind(kindUnregister), sb, n.hostedShards(agentID)...)
}

// SetStatus sets a hosted agent's status, stores it durably (a restart
// restores and re-announces it) and publishes it. It returns once the
// status is stored; a failed publish is reported but the status stands.
func (n *Node) SetStatus(ctx context.Context, agentID string, st record.Status) error {
	if !st.Valid() {
		return &record.FieldError{Field: "status", Reason: fmt.Sprintf("%q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", st)}
	}
	if _, ok := n.hostedRecord(agentID); !ok {
		return ErrNotHosted
	}
	if err := n.st.PutStatus(ctx, agentID, st); err != nil {
		return fmt.Errorf("store status: %w", err)
	}
	n.view.SetLocalStatus(agentID, st)
	if n.lan != nil {
		n.lan.SetStatus(agentID, st)
	}
	return n.publishStatus(ctx, agentID, st)
}

// publishStatus signs and publishes a status statement for a hosted agent.
func (n *Node) publishStatus(ctx context.Context, agentID string, st record.Status) error {
	sb, err := n.signBeat(agentID, st, "")
	if err != nil {
		return err
	}
	if n.gsp == nil || n.view.Quiet(agentID) {
		return nil // stored (a restart restores it); no peer holds the agent from gossip
	}
	n.noteBeat(sb.Beat)
	n.mu.Lock()
	if _, hosted := n.memo[agentID]; hosted {
		n.loud[agentID] = struct{}{}
	}
	n.mu.Unlock()
	return n.gsp.PublishBeat(ctx, gossip.Kind(kindStatus), sb, n.hostedShards(agentID)...)
}

// restoreStatuses applies the statuses hosted agents reported before a
// restart, before their records are announced again.
func (n *Node) restoreStatuses(ctx context.Context) error {
	sts, err := n.st.Statuses(ctx)
	if err != nil {
		return err
	}
	for id, st := range sts {
		if _, ok := n.hostedRecord(id); !ok {
			continue
		}
		n.view.SetLocalStatus(id, st)
		if n.lan != nil {
			n.lan.SetStatus(id, st)
		}
	}
	return nil
}

// Locals returns the hosted records.
func (n *Node) Locals() []*record.SignedAgent { return n.view.Locals() }

const (
	kindHeartbeat  = "heartbeat"
	kindStatus     = "status"
	kindUnregister = "unregister"
)

func (n *Node) hostedRecord(agentID string) (*record.SignedAgent, bool) {
	a, ok := n.view.Get(agentID)
	if !ok || !a.Local {
		return nil, false
	}
	return a.Record, true
}

// hostedShards returns the shards of a hosted agent's record.
func (n *Node) hostedShards(agentID string) []string {
	if sa, ok := n.hostedRecord(agentID); ok {
		return n.shardsOf(sa)
	}
	return nil
}

// nextRecordSeq returns the seq of a new record of agentID: above the
// stored counter, the wall clock in milliseconds and every seq this node
// used. Callers hold the agent's lock and store the record with PutLocal,
// which writes the seq into the counter; nothing is written here.
func (n *Node) nextRecordSeq(ctx context.Context, agentID string) (uint64, error) {
	seq, err := n.st.PeekSeq(ctx, agentID)
	if err != nil {
		return 0, fmt.Errorf("next seq: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if last := n.seqLocked(agentID); seq <= last {
		seq = last + 1
	}
	n.setSeqLocked(agentID, seq)
	return seq, nil
}

// nextBeatSeq returns max(last+1, now in ms): beats share the agent's seq
// space with its records without a disk write per heartbeat.
func (n *Node) nextBeatSeq(agentID string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	seq := max(n.seqLocked(agentID)+1, uint64(time.Now().UnixMilli()))
	n.setSeqLocked(agentID, seq)
	return seq
}

func (n *Node) noteSeq(agentID string, seq uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if seq > n.seqLocked(agentID) {
		n.setSeqLocked(agentID, seq)
	}
}

// seqLocked is the highest seq this node used for agentID (n.mu held):
// kept in the hosted agent's memo, or in lastSeq for an agent whose
// record the view has not taken yet or that is no longer hosted.
func (n *Node) seqLocked(agentID string) uint64 {
	if m, ok := n.memo[agentID]; ok {
		return m.seq
	}
	return n.lastSeq[agentID]
}

// setSeqLocked records seq as the highest used for agentID (n.mu held).
func (n *Node) setSeqLocked(agentID string, seq uint64) {
	if m, ok := n.memo[agentID]; ok {
		m.seq = seq
		n.memo[agentID] = m
		return
	}
	n.lastSeq[agentID] = seq
}

// signBeat signs a beat with the agent key when this node holds it, else
// (a record its client signed with its own key) with the peer key.
func (n *Node) signBeat(agentID string, st record.Status, reason record.UnregisterReason) (*record.SignedBeat, error) {
	return n.signHostedBeat(n.newBeat(agentID, st, reason))
}

// newBeat returns a hosted agent's next beat, not signed: the next seq of
// the agent's counter, now, and the interval this node beats at.
func (n *Node) newBeat(agentID string, st record.Status, reason record.UnregisterReason) record.Beat {
	return record.Beat{
		AgentID: agentID, PeerID: n.peerID, Seq: n.nextBeatSeq(agentID),
		Status: st, Reason: reason, Timestamp: time.Now().UnixMilli(),
		IntervalMS: n.heartbeatInterval().Milliseconds(),
	}
}

// signHostedBeat signs a hosted agent's beat with the agent key, or with
// the peer key when the agent's record is signed by a key this node does
// not hold (a client's own).
func (n *Node) signHostedBeat(b record.Beat) (*record.SignedBeat, error) {
	agentID := b.AgentID
	if sa, ok := n.hostedRecord(agentID); ok {
		if key, err := sa.AgentPublicKey(); err == nil && !key.Equal(&n.id.AgentKey.PublicKey) {
			return record.SignBeatPeer(b, n.id.PeerKey)
		}
	}
	return record.SignBeat(b, n.id.AgentKey)
}

// maxClaimedInterval bounds the heartbeat interval a sender may claim: the
// longer of this node's own budgeted interval and a sixth of the record
// TTL (10 min at the default hour). A silent agent then leaves a view
// within one record lifetime at the most (the liveness timeout is six
// intervals), however long a hostile sender says it beats.
//
// This node's own interval alone is too short a bound once views differ:
// a registry hosting 10 000 agents beats each every 100 s, while a node
// holding 256 of them (the per-peer quota) or only its interest budgets
// 5 s. Clamped to 5 s, the registry's agents went UNHEALTHY after 15 s,
// left after 30 s and were fetched again at their next beat, over and
// over, each fetch a signed answer from the registry.
func (n *Node) maxClaimedInterval() time.Duration {
	return max(n.heartbeatInterval(), n.cfg.RecordTTL/6)
}

// MaxClaimedInterval returns the longest heartbeat interval this node
// judges another host's agent by, whatever the host claims (a longer
// claim is clamped to it and counted as interval_clamped).
func (n *Node) MaxClaimedInterval() time.Duration { return n.maxClaimedInterval() }

// heartbeatInterval is the adaptive interval: the base interval, stretched
// so that the whole network's heartbeats stay under HeartbeatMaxRate
// messages per second (docs/scaling.md). Quiet hosted agents do not beat
// and do not count.
func (n *Node) heartbeatInterval() time.Duration {
	return adaptiveInterval(n.cfg.HeartbeatInterval, n.view.Beating(), n.cfg.HeartbeatMaxRate)
}

// HeartbeatInterval returns the interval this node currently beats at: the
// configured interval, stretched by the heartbeat budget (docs/scaling.md).
func (n *Node) HeartbeatInterval() time.Duration { return n.heartbeatInterval() }

// adaptiveInterval is max(base, agents/maxRate): with every agent beating
// at this interval the topic carries at most maxRate heartbeats per second.
// maxRate <= 0 disables the adaptation.
func adaptiveInterval(base time.Duration, agents int, maxRate float64) time.Duration {
	if maxRate <= 0 {
		return base
	}
	need := time.Duration(float64(agents) / maxRate * float64(time.Second))
	return max(base, need)
}

// resign re-signs a hosted record with a fresh seq and issued_at. Records
// signed by a client's own key cannot be re-signed here; they are
// re-announced as they are until they expire.
func (n *Node) resign(ctx context.Context, sa *record.SignedAgent) (*record.SignedAgent, error) {
	key, err := sa.AgentPublicKey()
	if err != nil {
		return nil, err
	}
	a := sa.Agent
	// A record of this node's previous key (a rotation since it was
	// signed) moves to the current key; a client's own key cannot be
	// re-signed here, so such a record is re-announced as it is.
	if !n.id.Rebind(&a) && !key.Equal(&n.id.AgentKey.PublicKey) {
		n.announce(ctx, sa)
		return sa, nil
	}
	seq, err := n.nextRecordSeq(ctx, a.AgentID)
	if err != nil {
		return nil, err
	}
	a.Fill(a.AgentID, a.PeerID, a.PublicKey, seq, time.Now(), n.cfg.RecordTTL)
	ns, err := n.id.Sign(&a)
	if err != nil {
		return nil, err
	}
	n.ver.NoteSigned(ns)
	return n.host_(ctx, ns)
}

// isForeignKey reports whether err says the agent id is bound to another
// key (seed 000 ErrDuplicateID), as opposed to a certificate that
// certifies another key.
func isForeignKey(err error) bool {
	var re *trust.RejectError
	return errors.As(err, &re) && re.Reason == trust.ReasonKeyMismatch && re.Field == "public_key"
}

// sameContent reports whether a registration would only restate the
// hosted record (identity and freshness fields aside).
func sameContent(cur *record.Agent, a *record.Agent) bool {
	x, y := *cur, *a
	for _, r := range []*record.Agent{&x, &y} {
		r.Seq, r.IssuedAt, r.TTLSeconds = 0, "", 0
		r.PeerID, r.PublicKey = "", ""
		r.Certificate, r.KeyRotation = "", nil
		if r.AgentID == "" {
			r.AgentID = cur.AgentID
		}
	}
	y.SyncCapabilities()
	cx, err1 := record.Canonicalize(&x)
	cy, err2 := record.Canonicalize(&y)
	return err1 == nil && err2 == nil && string(cx) == string(cy)
}

// ---- what the DHT serves ----

type hosted struct{ n *Node }

func (h hosted) HostedRecords(q dht.FetchQuery) []*record.SignedAgent {
	if q.AgentID != "" {
		sa, ok := h.n.hostedRecord(q.AgentID)
		if !ok || !sa.Agent.Offers(q.Skill, q.Capability) {
			return nil
		}
		return []*record.SignedAgent{sa}
	}
	// An answer holds at most MaxRecordsPerResponse records; a few more
	// leave room for the ones the DHT skips.
	return h.n.view.LocalsOffering(q.Skill, q.Capability, 2*dht.MaxRecordsPerResponse)
}

func (h hosted) SignChallenge(agentID string, msg []byte) ([]byte, bool, error) {
	sa, ok := h.n.hostedRecord(agentID)
	if !ok {
		// Unregistered meanwhile: let the DHT sign with the peer key.
		return nil, false, nil
	}
	key, err := sa.AgentPublicKey()
	if err != nil || !key.Equal(&h.n.id.AgentKey.PublicKey) {
		return nil, false, nil
	}
	sig, err := record.SignBytes(h.n.id.AgentKey, msg)
	return sig, err == nil, err
}

// ---- fetching agents announced before we arrived ----

// fetchUnknown fetches the record of an agent whose heartbeat arrived
// before its record, from the peer that authored the heartbeat. It is
// deduplicated per agent and bounded in concurrency; it never blocks the
// caller (a gossip validator).
func (n *Node) fetchUnknown(agentID string, from peer.ID, interval time.Duration) {
	if n.dht == nil || from == "" {
		return
	}
	n.mu.Lock()
	if !n.started || n.closed {
		n.mu.Unlock()
		return
	}
	if t, ok := n.fetches[agentID]; ok && time.Since(t) < n.cfg.UnknownFetchBackoff {
		n.mu.Unlock()
		return
	}
	n.fetches[agentID] = time.Now()
	if len(n.fetches) > 4096 {
		for id, t := range n.fetches {
			if time.Since(t) > n.cfg.UnknownFetchBackoff {
				delete(n.fetches, id)
			}
		}
	}
	select {
	case n.fetchSem <- struct{}{}:
	default:
		// Too many fetches in flight: the next heartbeat will retry.
		delete(n.fetches, agentID)
		n.mu.Unlock()
		return
	}
	// Add under n.mu: Close sets closed under n.mu before it waits.
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		defer func() { <-n.fetchSem }()
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		recs, err := n.dht.Fetch(ctx, peer.AddrInfo{ID: from}, dht.FetchQuery{AgentID: agentID})
		if err != nil {
			n.log.Debug("fetch of unknown agent failed", "agent_id", agentID, "peer_id", from, "err", err)
			return
		}
		for _, sa := range recs {
			if !n.inInterest(&sa.Agent) {
				// A beat on a shard topic of an agent outside every joined
				// shard: its host published it where it does not belong.
				n.log.Debug("fetched record outside the interest dropped", "agent_id", sa.Agent.AgentID, "peer_id", from)
				n.m.Reject("gossip", reasonOutsideInterest)
				continue
			}
			// Its host answered just now, at the interval its beat claimed
			// (clamped by the view): judged by the default instead, an
			// agent of a registry beating every 100 s went UNHEALTHY 15 s
			// after the fetch and was fetched again at its next beat.
			if err := n.view.LearnFetched(sa, interval); err != nil {
				n.log.Debug("fetched record not applied", "agent_id", sa.Agent.AgentID, "err", err)
			}
		}
	}()
}

// refreshEntry is the store's refresh-before-expiry hook (seed 001 §11.1,
// cache.refreshBeforeExpiry): a cached record about to expire whose agent
// is not kept fresh by heartbeats is fetched again from its host, so a
// record found through the DHT or the LAN stays answerable while its host
// serves it. It never blocks the store (bounded, dropped when busy).
func (n *Node) refreshEntry(e store.Entry) {
	if n.dht == nil || e.Record == nil {
		return
	}
	a := &e.Record.Agent
	if v, ok := n.view.Get(a.AgentID); ok && (v.Local || time.Since(v.LastHeard) < n.cfg.HeartbeatInterval*2) {
		return // hosted here, or heartbeats keep it fresh
	}
	if e.Source != store.SourceDHT && e.Source != store.SourceLAN && e.Source != store.SourceGossip {
		return
	}
	p, err := peer.Decode(a.PeerID)
	if err != nil {
		return
	}
	n.mu.Lock()
	if !n.started || n.closed {
		n.mu.Unlock()
		return
	}
	select {
	case n.fetchSem <- struct{}{}:
	default:
		n.mu.Unlock()
		return
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		defer func() { <-n.fetchSem }()
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		recs, err := n.dht.Fetch(ctx, peer.AddrInfo{ID: p}, dht.FetchQuery{AgentID: a.AgentID})
		if err != nil {
			n.log.Debug("refresh before expiry failed", "agent_id", a.AgentID, "err", err)
			return
		}
		for _, sa := range recs {
			_ = n.view.Learn(sa, e.Source, true)
		}
	}()
}
