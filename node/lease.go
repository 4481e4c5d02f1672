package node

import (
	"context"
	"time"

	"github.com/agentd/agentd/record"
)

// Lease makes a hosted registration expire at until unless renewed: when
// the lease passes, the node unregisters the agent (published with reason
// SHUTDOWN, so peers drop it at once). A zero until removes the lease; the
// registration then lasts until Unregister. JSON-RPC registrations with
// ttl_seconds (seed 002) and WebSocket-bound registrations (seed 003) use
// leases. Leases survive a restart of the node.
func (n *Node) Lease(agentID string, until time.Time) error {
	if _, ok := n.hostedRecord(agentID); !ok {
		return ErrNotHosted
	}
	if err := n.st.PutLease(context.Background(), agentID, until); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if until.IsZero() {
		delete(n.leases, agentID)
	} else {
		n.leases[agentID] = until
	}
	return nil
}

// LeaseOf returns the lease of a hosted registration, if it has one.
func (n *Node) LeaseOf(agentID string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.leases[agentID]
	return t, ok
}

// expireLeases unregisters registrations whose lease passed.
func (n *Node) expireLeases() {
	now := time.Now()
	var expired []string
	n.mu.Lock()
	for id, until := range n.leases {
		if !now.Before(until) {
			expired = append(expired, id)
			delete(n.leases, id)
		}
	}
	n.mu.Unlock()
	for _, id := range expired {
		n.log.Info("registration lease expired", "agent_id", id)
		if err := n.Unregister(n.ctx, id, record.ReasonShutdown); err != nil && err != ErrNotHosted {
			n.log.Warn("unregister after lease expiry failed", "agent_id", id, "err", err)
		}
	}
}

// restoreLeases loads the leases of hosted registrations after a restart.
func (n *Node) restoreLeases(ctx context.Context) error {
	leases, err := n.st.Leases(ctx)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, until := range leases {
		n.leases[id] = until
	}
	return nil
}
