package node

import (
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// LearnUnbound admits a record without peer binding
// (record.SignedAgent.Unbound): the Announce of a seed-000 agent that signs
// its agent object with its own key and knows nothing of agentd's peer_id
// and peer_signature. Seed 000 lets such an agent register with a registry
// (POST /agents, the WebSocket binding) and announce itself on the LAN;
// those surfaces call this, nothing that hears from other peers does.
//
// The record is stamped with what seed 000 leaves out (seq, issued_at,
// ttl_seconds: RecordTTL; see record.SignedAgent.StampUnbound), verified by
// its agent signature under the trust policy (allow-list, certificate
// chain, the key pinned for its agent_id), and enters the live view from
// src. It is never forwarded to other peers, and it leaves the view when
// its agent stops re-announcing it (the liveness timeout). It returns the
// stamped record.
func (n *Node) LearnUnbound(sa *record.SignedAgent, src store.Source) (*record.SignedAgent, error) {
	if !sa.Unbound() {
		return nil, &trust.RejectError{Reason: trust.ReasonMalformed, Detail: "the record is bound to peer " + sa.Agent.PeerID}
	}
	st, err := sa.StampUnbound(time.Now(), n.cfg.RecordTTL)
	if err != nil {
		return nil, err
	}
	if err := n.ver.VerifyAgent(st, trust.VerifyOptions{AllowUnbound: true, Transport: string(src)}); err != nil {
		return nil, err
	}
	if err := n.view.LearnUnbound(st, src); err != nil {
		return nil, err
	}
	return st, nil
}
