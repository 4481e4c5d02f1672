package acceptance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// Seed 000 acceptance criterion 4: an agent whose certificate is revoked
// cannot register anywhere. Two honest nodes run the ca policy with the
// CA's CRL; the revoked agent runs its own node (which does not check
// certificates) and announces itself. A certified agent is the control:
// it gets through every path the revoked one is refused on.
func TestRevokedAgentRegistersNowhere(t *testing.T) {
	bubble(t, func(t *testing.T) {
		p := newPKI(t)
		good, revoked, stranger := newIdentity(t), newIdentity(t), newIdentity(t)
		p.certify(good)
		p.certify(revoked)
		p.revoke(revoked)
		caPolicy := trust.Config{Policy: trust.PolicyCA}

		tn := newNet(t)
		s0, s1 := p.store(), p.store()
		h0 := tn.add(good, caPolicy, s0, nil)
		h1 := tn.add(newIdentity(t), caPolicy, s1, nil)
		rogue := tn.add(revoked, trust.Config{}, nil, nil) // checks no certificate, announces anyway
		tn.meshed()

		goodRec, err := h0.Register(context.Background(), spec("skill-good", "cap-good"))
		if err != nil {
			t.Fatal(err)
		}
		rogueRec, err := rogue.Register(context.Background(), spec("skill-rogue", "cap-rogue"))
		if err != nil {
			t.Fatal(err)
		}
		if rogueRec.Agent.Certificate == "" {
			t.Fatal("the revoked agent's record carries no certificate")
		}

		// Gossip: the certified agent arrives, the revoked one is refused.
		waitFor(t, 10*time.Second, "the certified agent at h1 by gossip", func() bool { return h1.live(goodRec.Agent.AgentID) })
		waitFor(t, 10*time.Second, "gossip refusals", func() bool {
			return h0.rejects("gossip", trust.ReasonRevoked) >= 1 && h1.rejects("gossip", trust.ReasonRevoked) >= 1
		})
		if h0.live(rogueRec.Agent.AgentID) || h1.live(rogueRec.Agent.AgentID) {
			t.Fatal("the revoked agent is in an honest node's live view")
		}

		// DHT: the rogue provides its capability; a lookup finds it,
		// fetches its record over /agentd/record/1.0.0 and refuses it.
		var derr error
		waitFor(t, 30*time.Second, "a DHT fetch refused as revoked", func() bool {
			_, derr = h1.Discover(context.Background(), node.Query{Filter: store.Filter{Capability: "cap-rogue"}})
			return h1.rejects("dht", trust.ReasonRevoked) >= 1
		})
		var de *node.DiscoveryError
		if _, derr = h1.Discover(context.Background(), node.Query{Filter: store.Filter{Capability: "cap-rogue"}}); !errors.As(derr, &de) || de.Code != record.CodeNoSkillsFound {
			t.Fatalf("discover of the revoked agent's capability: %v", derr)
		}
		// The DHT value /agentd/<agent-id> is refused too.
		// (Values are stored asynchronously after the provide: poll.)
		waitFor(t, 20*time.Second, "the DHT value refused as revoked", func() bool {
			_, err := h1.DHT().GetRecord(context.Background(), rogueRec.Agent.AgentID)
			return trust.ReasonOf(err) == trust.ReasonRevoked
		})
		before := h1.rejects("dht", trust.ReasonRevoked)
		if _, err := h1.GetAgent(context.Background(), rogueRec.Agent.AgentID, true); err == nil {
			t.Fatal("GetAgent returned the revoked agent")
		}
		if h1.rejects("dht", trust.ReasonRevoked) <= before {
			t.Fatal("GetAgent did not refuse the DHT value as revoked")
		}
		if h1.live(rogueRec.Agent.AgentID) {
			t.Fatal("the revoked agent entered h1's view through the DHT")
		}
		// The control: the certified agent's DHT value is accepted.
		waitFor(t, 20*time.Second, "the certified agent's DHT value", func() bool {
			_, err := h1.GetAgent(context.Background(), goodRec.Agent.AgentID, true)
			return err == nil
		})

		// Registration (what POST /agents, JSON-RPC register and the
		// WebSocket register call): a signed Announce of the revoked
		// agent, and an honest node whose own certificate is revoked.
		code, body := h1.postAnnounce(t, signed(t, revoked, h1.id.PeerID, spec("skill-rogue", "cap-rogue"), 6))
		if code != 403 || body.Error != record.CodeForbidden || !strings.Contains(body.Message, "revoked") {
			t.Fatalf("POST /agents of the revoked agent: %d %+v", code, body)
		}
		_, err = h1.RegisterSigned(context.Background(), signed(t, revoked, h1.id.PeerID, spec("skill-rogue", "cap-rogue"), 7))
		wantReason(t, err, trust.ReasonRevoked)
		if errors.Is(err, node.ErrForeignKey) {
			t.Fatal("a revoked certificate reported as an agent id conflict")
		}
		_, err = h1.RegisterSigned(context.Background(), signed(t, stranger, h1.id.PeerID, spec("skill-s", "cap-s"), 1))
		wantReason(t, err, trust.ReasonNoCertificate)
		p.certify(stranger)
		if code, body := h1.postAnnounce(t, signed(t, stranger, h1.id.PeerID, spec("skill-s", "cap-s"), 2)); code != 200 {
			t.Fatalf("POST /agents of a certified agent: %d %+v", code, body)
		}
		selfID := newIdentity(t)
		p.certify(selfID)
		p.revoke(selfID)
		self := tn.add(selfID, caPolicy, p.store(), nil)
		_, err = self.Register(context.Background(), spec("skill-self", "cap-self"))
		wantReason(t, err, trust.ReasonRevoked)

		// Revocation after registration: the certified agent's
		// certificate is revoked and h1 reloads its trust store (what
		// SIGHUP does). Its heartbeats are refused from then on, so it
		// leaves h1's live view within the liveness timeout, and its
		// record is refused everywhere.
		p.revoke(good)
		if err := s1.Reload(); err != nil {
			t.Fatal(err)
		}
		beatsBefore := h1.rejects("gossip", trust.ReasonRevoked)
		waitFor(t, 15*time.Second, "heartbeats refused as revoked", func() bool { return h1.rejects("gossip", trust.ReasonRevoked) > beatsBefore })
		waitFor(t, 60*time.Second, "the revoked agent leaves h1's live view", func() bool { return !h1.live(goodRec.Agent.AgentID) })
		wantReason(t, h1.Verifier().VerifyAgent(goodRec, trust.VerifyOptions{}), trust.ReasonRevoked)
	})
}

// The LAN (UDP multicast and mDNS, in memory) never learns a revoked agent
// or an agent that is not allow-listed; it learns the certified,
// allow-listed one.
func TestLANRefusesRevokedAndUnlisted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		p := newPKI(t)
		good, revoked, outsider := newIdentity(t), newIdentity(t), newIdentity(t)
		p.certify(good)
		p.certify(revoked)
		p.revoke(revoked)
		n := newMemNet()
		caRx := newLANNode(t, n, "10.0.0.1", newIdentity(t), trust.Config{Policy: trust.PolicyCA, Chain: p.store()})
		alRx := newLANNode(t, n, "10.0.0.2", newIdentity(t), trust.Config{Policy: trust.PolicyAllowlist, AllowList: []string{good.AgentID}})
		g := newLANNode(t, n, "10.0.0.3", good, trust.Config{})
		r := newLANNode(t, n, "10.0.0.4", revoked, trust.Config{})
		o := newLANNode(t, n, "10.0.0.5", outsider, trust.Config{})
		g.host("skill-good", "cap-good")
		r.host("skill-rogue", "cap-rogue")
		o.host("skill-out", "cap-out")
		for _, ln := range []*lanNode{caRx, alRx, g, r, o} {
			ln.start()
		}
		waitFor(t, 10*time.Second, "the certified, allow-listed agent on the LAN", func() bool {
			return caRx.knows(good.AgentID) && alRx.knows(good.AgentID)
		})
		waitFor(t, 10*time.Second, "LAN refusals", func() bool {
			return caRx.lanRejects(trust.ReasonRevoked) >= 1 && alRx.lanRejects(trust.ReasonNotAllowlisted) >= 1
		})
		// Let several broadcast rounds pass: still refused.
		time.Sleep(30 * time.Second)
		if caRx.knows(revoked.AgentID) {
			t.Fatal("the ca-policy node learnt the revoked agent on the LAN")
		}
		if alRx.knows(outsider.AgentID) || alRx.knows(revoked.AgentID) {
			t.Fatal("the allow-list node learnt an agent that is not listed")
		}
		// The outsider has no certificate: the ca-policy node refuses it too.
		if caRx.knows(outsider.AgentID) {
			t.Fatal("the ca-policy node learnt an agent without a certificate")
		}
		if caRx.lanRejects(trust.ReasonNoCertificate) < 1 {
			t.Fatal("the certificate-less agent was not refused for its missing certificate")
		}
	})
}
