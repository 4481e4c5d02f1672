package acceptance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// Key rotation across a small network (seed 000 §6.1): an agent rotates
// its key (agentd key rotate) and restarts; its peers accept the new key
// at once, keep accepting the old one until the grace period ends, then
// refuse it with key_retired. Virtual time makes the grace period pass.
func TestKeyRotationAcrossNetwork(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const grace = 2 * time.Minute
		tc := trust.Config{RotationGrace: grace}
		dir := t.TempDir()
		old, err := trust.LoadOrCreate(dir)
		if err != nil {
			t.Fatal(err)
		}
		tn := newNet(t)
		p0 := tn.add(newIdentity(t), tc, nil, nil)
		p1 := tn.add(newIdentity(t), tc, nil, nil)
		ag := tn.add(old, tc, nil, nil)
		tn.meshed()
		first, err := ag.Register(context.Background(), spec("skill-rot", "cap-rot"))
		if err != nil {
			t.Fatal(err)
		}
		agentID := first.Agent.AgentID
		for _, p := range []*tnode{p0, p1} {
			waitFor(t, 10*time.Second, "the agent at its peers", func() bool { return p.live(agentID) })
		}

		// agentd key rotate, then a restart with the new key.
		rotated, err := trust.Rotate(old, dir, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := trust.LoadOrCreate(dir)
		if err != nil || !loaded.AgentKey.Equal(rotated.AgentKey) || loaded.Rotation == nil {
			t.Fatalf("the rotated identity does not load back: %v", err)
		}
		ag = tn.restart(ag, loaded, tc, nil)
		for _, p := range []*tnode{p0, p1} {
			waitFor(t, 20*time.Second, "the restarted agent's gossip peers", func() bool {
				return slices.Contains(ag.Gossip().TopicPeers(), p.Host().ID())
			})
		}
		second := spec("skill-rot", "cap-rot")
		second.Tags = []string{"rotated"}
		sa, err := ag.Register(context.Background(), second)
		if err != nil {
			t.Fatal(err)
		}
		if sa.Agent.KeyRotation == nil || sa.Agent.PublicKey != loaded.PublicKeyPEM() {
			t.Fatal("the new record does not carry the rotation statement")
		}
		rotatedAt := time.Now()

		// The new key is accepted at once.
		for _, p := range []*tnode{p0, p1} {
			waitFor(t, 5*time.Second, "the new key at a peer", func() bool {
				a, ok := p.View().Get(agentID)
				return ok && a.Record.Agent.PublicKey == loaded.PublicKeyPEM()
			})
			if k, ok := p.Verifier().AgentKey(agentID); !ok || !k.Equal(&loaded.AgentKey.PublicKey) {
				t.Fatal("the peer's pin did not move to the new key")
			}
		}
		t.Logf("peers took the new key %s after the registration", time.Since(rotatedAt))

		// The old key, inside the grace period: a record it signs (with
		// a newer seq) is accepted over gossip and becomes the peers'
		// record; its heartbeats verify.
		oldRecord := func(tag string) *record.SignedAgent {
			t.Helper()
			a := spec("skill-rot", "cap-rot")
			a.Tags = []string{tag}
			a.Fill(agentID, old.PeerID.String(), old.PublicKeyPEM(), uint64(time.Now().UnixMilli())+1000, time.Now(), time.Hour)
			r, err := record.Sign(a, old.AgentKey, old.PeerKey)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		oldBeat := func() *record.SignedBeat {
			t.Helper()
			b, err := record.SignBeat(record.Beat{AgentID: agentID, PeerID: old.PeerID.String(), Seq: uint64(time.Now().UnixMilli()) + 2000,
				Status: record.StatusHealthy, Timestamp: time.Now().UnixMilli()}, old.AgentKey)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		time.Sleep(grace / 2)
		inGrace := oldRecord("old-key-in-grace")
		if err := ag.Gossip().PublishAnnounce(context.Background(), inGrace); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*tnode{p0, p1} {
			waitFor(t, 5*time.Second, "the old key's record accepted in the grace period", func() bool {
				a, ok := p.View().Get(agentID)
				return ok && a.Record.Agent.PublicKey == old.PublicKeyPEM()
			})
			wantReason(t, p.Verifier().VerifyBeat(oldBeat(), ag.id.PeerID), "")
			if n := p.rejects("gossip", trust.ReasonKeyRetired); n != 0 {
				t.Fatalf("%v key_retired rejections inside the grace period", n)
			}
		}

		// After the grace period: refused with key_retired. The agent's
		// own node will not even put the retired key's record on the wire
		// (gossip validates what it publishes like what it receives), and
		// every peer's verifier — what gossip, the DHT, the LAN and the API
		// call — refuses it; the new key goes on working.
		time.Sleep(time.Until(rotatedAt.Add(grace)) + time.Second)
		late := oldRecord("old-key-after-grace")
		if err := ag.Gossip().PublishAnnounce(context.Background(), late); !errors.Is(err, gossip.ErrRejected) || !strings.Contains(err.Error(), string(trust.ReasonKeyRetired)) {
			t.Fatalf("the retired key's record: %v, want a key_retired refusal", err)
		}
		for _, p := range []*tnode{p0, p1} {
			wantReason(t, p.Verifier().VerifyAgent(late, trust.VerifyOptions{}), trust.ReasonKeyRetired)
			wantReason(t, p.Verifier().VerifyAgent(inGrace, trust.VerifyOptions{}), trust.ReasonKeyRetired)
			wantReason(t, p.Verifier().VerifyBeat(oldBeat(), ag.id.PeerID), trust.ReasonBadSignature)
			if ks := p.Verifier().AcceptedKeys(agentID); len(ks) != 1 || !ks[0].Equal(&loaded.AgentKey.PublicKey) {
				t.Fatal("the peer still accepts two keys")
			}
		}
		third := spec("skill-rot", "cap-rot")
		third.Tags = []string{"after-grace"}
		if _, err := ag.Register(context.Background(), third); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*tnode{p0, p1} {
			waitFor(t, 5*time.Second, "the new key's record after the grace period", func() bool {
				a, ok := p.View().Get(agentID)
				return ok && a.Record.Agent.PublicKey == loaded.PublicKeyPEM() && len(a.Record.Agent.Tags) == 1 && a.Record.Agent.Tags[0] == "after-grace"
			})
		}
	})
}
