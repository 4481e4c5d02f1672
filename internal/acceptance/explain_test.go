package acceptance

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// "My agent is registered: why can't this node see it?" Explain answers
// for an agent that is visible, one refused for a bad signature (sent by
// a peer that lies), for a revoked certificate and by the allow-list, one
// that left, and one never heard of; and it traces a capability query
// through the resolver.
func TestExplainWhyAnAgentIsOrIsNotVisible(t *testing.T) {
	bubble(t, func(t *testing.T) {
		p := newPKI(t)
		good, revoked, outsider := newIdentity(t), newIdentity(t), newIdentity(t)
		p.certify(good)
		p.certify(revoked)
		p.revoke(revoked)

		tn := newNet(t)
		// ca: the ca policy with the CRL; al: an allow-list of good only.
		ca := tn.add(newIdentity(t), trust.Config{Policy: trust.PolicyCA}, p.store(), nil)
		al := tn.add(newIdentity(t), trust.Config{Policy: trust.PolicyAllowlist, AllowList: []string{good.AgentID}}, nil, nil)
		g := tn.add(good, trust.Config{}, nil, nil)
		rogue := tn.add(revoked, trust.Config{}, nil, nil)
		out := tn.add(outsider, trust.Config{}, nil, nil)
		tn.meshed()
		ctx := context.Background()
		explain := func(n *tnode, q node.ExplainQuery) *node.Explanation {
			t.Helper()
			ex, err := n.Explain(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return ex
		}
		byID := func(id string) node.ExplainQuery {
			return node.ExplainQuery{Filter: store.Filter{AgentID: id}, LocalOnly: true}
		}

		_, err := g.Register(ctx, spec("skill-good", "cap-good"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rogue.Register(ctx, spec("skill-rogue", "cap-rogue")); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Register(ctx, spec("skill-out", "cap-out")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the certified agent at ca and al", func() bool { return ca.live(good.AgentID) && al.live(good.AgentID) })
		waitFor(t, 10*time.Second, "refusals", func() bool {
			return ca.rejects("gossip", trust.ReasonRevoked) >= 1 && al.rejects("gossip", trust.ReasonNotAllowlisted) >= 1
		})

		// Visible: heard by gossip, with its heartbeat clock.
		ex := explain(ca, byID(good.AgentID))
		if ex.Verdict != node.ExplainVisible || ex.Live == nil || ex.Live.Source != store.SourceGossip {
			t.Fatalf("visible agent: %+v", ex)
		}
		if !slices.ContainsFunc(ex.Heard, func(h journalHeard) bool { return h.Transport == "gossip" && h.Kind == "record" && h.Count >= 1 }) {
			t.Fatalf("heard: %+v", ex.Heard)
		}
		if !ex.Live.TimeoutAt.After(ex.Live.LastHeard) || !ex.Trust.KeyPinned || !ex.Live.PeerConnected {
			t.Fatalf("live state: %+v, trust %+v", ex.Live, ex.Trust)
		}
		waitFor(t, 15*time.Second, "a heartbeat in the journal", func() bool {
			ex := explain(ca, byID(good.AgentID))
			return slices.ContainsFunc(ex.Heard, func(h journalHeard) bool { return h.Kind == "beat" && h.Count >= 1 })
		})
		// A query whose filter excludes it says which filter.
		ex = explain(ca, node.ExplainQuery{Filter: store.Filter{AgentID: good.AgentID, Capability: "cap-good", Version: ">=2"}, LocalOnly: true})
		if ex.Verdict != node.ExplainFiltered || !slices.Equal(ex.Mismatched, []string{"version=>=2"}) {
			t.Fatalf("filtered: verdict %s, mismatched %v", ex.Verdict, ex.Mismatched)
		}

		// Revoked certificate, at the ca node.
		ex = explain(ca, byID(revoked.AgentID))
		if ex.Verdict != node.ExplainRefused || lastReason(ex) != string(trust.ReasonRevoked) || len(ex.Next) == 0 {
			t.Fatalf("revoked: %s %q %v", ex.Verdict, lastReason(ex), ex.Refusals)
		}
		// Not allow-listed, at the allow-list node.
		ex = explain(al, byID(outsider.AgentID))
		if ex.Verdict != node.ExplainRefused || lastReason(ex) != string(trust.ReasonNotAllowlisted) || !strings.Contains(strings.Join(ex.Next, " "), "allowList") {
			t.Fatalf("not allow-listed: %s %q next %v", ex.Verdict, lastReason(ex), ex.Next)
		}

		// A bad signature from a peer that lies: it signs a record of its
		// own, changes the name after signing and publishes it over its
		// own GossipSub router.
		liar := newIdentity(t)
		lh, err := tn.mn.AddPeer(liar.PeerKey, ma.StringCast("/ip6/100::99/tcp/4242"))
		if err != nil {
			t.Fatal(err)
		}
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ps, err := pubsub.NewGossipSub(lctx, lh, pubsub.WithMessageIdFn(gossip.MessageID), pubsub.WithFloodPublish(true), pubsub.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		top, err := ps.Join(gossip.AnnounceTopic)
		if err != nil {
			t.Fatal(err)
		}
		if err := lh.Connect(ctx, peer.AddrInfo{ID: ca.Host().ID(), Addrs: ca.Host().Addrs()}); err != nil {
			t.Fatal(err)
		}
		a := spec("skill-liar", "cap-good")
		a.AgentName = "honest-name"
		co, err := signed(t, liar, liar.PeerID, a, 1).CoSign(liar.PeerKey)
		if err != nil {
			t.Fatal(err)
		}
		data, err := gossip.EncodeAnnounce(co)
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.Replace(data, []byte("honest-name"), []byte("forged-name"), 1)
		waitFor(t, 10*time.Second, "the liar's subscription known", func() bool { return slices.Contains(ps.ListPeers(gossip.AnnounceTopic), ca.Host().ID()) })
		if err := top.Publish(lctx, data); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the liar's record refused", func() bool {
			return ca.rejects("gossip", trust.ReasonBadSignature) >= 1
		})
		ex = explain(ca, byID(liar.AgentID))
		if ex.Verdict != node.ExplainRefused || lastReason(ex) != string(trust.ReasonBadSignature) || ex.Refusals[len(ex.Refusals)-1].Transport != "gossip" {
			t.Fatalf("bad signature: %s %+v", ex.Verdict, ex.Refusals)
		}
		// A capability query lists the refused offer and the resolver's path.
		ex = explain(ca, node.ExplainQuery{Filter: store.Filter{Capability: "cap-good"}, LocalOnly: true})
		if ex.Verdict != node.ExplainFound || ex.Resolver == nil || ex.Resolver.AnsweredBy != "local" || len(ex.Results) != 1 || ex.Results[0].AgentID != good.AgentID {
			t.Fatalf("capability query: %+v", ex)
		}
		if !slices.ContainsFunc(ex.RefusedOffering, func(e journalEntry) bool { return e.AgentID == liar.AgentID }) {
			t.Fatalf("refused offers: %+v", ex.RefusedOffering)
		}
		ex = explain(ca, node.ExplainQuery{Filter: store.Filter{Capability: "cap-nobody"}, LocalOnly: true})
		if ex.Verdict != node.ExplainNotFound || !strings.HasPrefix(ex.ResolverError, "DISC_002") || len(ex.Resolver.Steps) == 0 {
			t.Fatalf("capability nobody offers: %+v", ex)
		}

		// Never heard of.
		ex = explain(ca, byID(uuid.NewString()))
		if ex.Verdict != node.ExplainUnknown || len(ex.Heard) != 0 || len(ex.Next) == 0 {
			t.Fatalf("unknown agent: %+v", ex)
		}

		// Left: the good agent's node crashes.
		tn.stop(g)
		if err := g.st.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the crashed agent leaves ca's view", func() bool { return !ca.live(good.AgentID) })
		ex = explain(ca, byID(good.AgentID))
		if ex.Verdict != node.ExplainExpired || ex.Left == nil || ex.Left.Reason == "" {
			t.Fatalf("left: %s left %+v summary %q", ex.Verdict, ex.Left, ex.Summary)
		}
		t.Logf("left: %s", ex.Summary)
	})
}

func lastReason(ex *node.Explanation) string {
	if len(ex.Refusals) == 0 {
		return ""
	}
	return ex.Refusals[len(ex.Refusals)-1].Reason
}

type (
	journalHeard = journal.Heard
	journalEntry = journal.Entry
)
