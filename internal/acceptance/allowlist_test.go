package acceptance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// Seed 000 acceptance criterion 6 (and §6 criterion 2): an agent id that
// is not allow-listed is refused by the registration path with
// not_allowlisted — which the API answers with 403 ErrForbidden — and is
// ignored on gossip and the DHT (the LAN: TestLANRefusesRevokedAndUnlisted).
func TestNonAllowlistedAgentIgnored(t *testing.T) {
	bubble(t, func(t *testing.T) {
		a0, a1, listed, outsider := newIdentity(t), newIdentity(t), newIdentity(t), newIdentity(t)
		policy := trust.Config{Policy: trust.PolicyAllowlist, AllowList: []string{a0.AgentID, a1.AgentID, listed.AgentID}}
		tn := newNet(t)
		h0 := tn.add(a0, policy, nil, nil)
		h1 := tn.add(a1, policy, nil, nil)
		out := tn.add(outsider, trust.Config{}, nil, nil)
		tn.meshed()

		control, err := h0.Register(context.Background(), spec("skill-listed", "cap-listed"))
		if err != nil {
			t.Fatal(err)
		}
		outRec, err := out.Register(context.Background(), spec("skill-out", "cap-out"))
		if err != nil {
			t.Fatal(err)
		}

		// Gossip: announcements and heartbeats of the outsider are ignored.
		waitFor(t, 10*time.Second, "the listed agent at h1", func() bool { return h1.live(control.Agent.AgentID) })
		waitFor(t, 20*time.Second, "gossip refusals (announce and heartbeats)", func() bool {
			return h0.rejects("gossip", trust.ReasonNotAllowlisted) >= 2 && h1.rejects("gossip", trust.ReasonNotAllowlisted) >= 2
		})
		if h0.live(outRec.Agent.AgentID) || h1.live(outRec.Agent.AgentID) {
			t.Fatal("the outsider is in a live view")
		}

		// DHT: provider fetch and DHT value are refused.
		waitFor(t, 30*time.Second, "a DHT fetch refused", func() bool {
			_, _ = h1.Discover(context.Background(), node.Query{Filter: store.Filter{Capability: "cap-out"}})
			return h1.rejects("dht", trust.ReasonNotAllowlisted) >= 1
		})
		var de *node.DiscoveryError
		if _, err := h1.Discover(context.Background(), node.Query{Filter: store.Filter{Capability: "cap-out"}}); !errors.As(err, &de) || de.Code != record.CodeNoSkillsFound {
			t.Fatalf("discover of the outsider's capability: %v", err)
		}
		waitFor(t, 20*time.Second, "the DHT value refused", func() bool {
			_, err := h1.DHT().GetRecord(context.Background(), outRec.Agent.AgentID)
			return trust.ReasonOf(err) == trust.ReasonNotAllowlisted
		})
		if _, err := h1.GetAgent(context.Background(), outRec.Agent.AgentID, true); err == nil {
			t.Fatal("GetAgent returned the outsider")
		}

		// Registration through the API: 403 ErrForbidden for the
		// outsider, 200 for a listed agent; the node's registration path
		// says why.
		code, body := h1.postAnnounce(t, signed(t, outsider, h1.id.PeerID, spec("skill-out", "cap-out"), 3))
		if code != 403 || body.Error != record.CodeForbidden || body.Field != "agent.agent_id" {
			t.Fatalf("POST /agents of the outsider: %d %+v", code, body)
		}
		_, err = h1.RegisterSigned(context.Background(), signed(t, outsider, h1.id.PeerID, spec("skill-out", "cap-out"), 4))
		wantReason(t, err, trust.ReasonNotAllowlisted)
		if code, body := h1.postAnnounce(t, signed(t, listed, h1.id.PeerID, spec("skill-l", "cap-l"), 1)); code != 200 {
			t.Fatalf("POST /agents of a listed agent: %d %+v", code, body)
		}
		// The node's own agent id is the outsider's: the node cannot even
		// register itself under the allow-list policy.
		self := tn.add(newIdentity(t), policy, nil, nil)
		_, err = self.Register(context.Background(), spec("skill-self", "cap-self"))
		wantReason(t, err, trust.ReasonNotAllowlisted)
	})
}
