package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// discoverJSON runs `agentd discover --json` and returns the agent ids.
func discoverJSON(t *testing.T, api string, args ...string) ([]string, result) {
	t.Helper()
	r := cli(t, append([]string{"discover", "--api", api, "--json"}, args...)...)
	if r.code != 0 {
		return nil, r
	}
	var out struct {
		Agents []struct {
			Agent  record.Agent `json:"agent"`
			Source string       `json:"source"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("discover output: %v\n%s", err, r.stdout)
	}
	var ids []string
	for _, a := range out.Agents {
		ids = append(ids, a.Agent.AgentID+"@"+a.Source)
	}
	return ids, r
}

// TestWideAreaDiscovery is issue 3's multi-process test: one bootstrap
// node and three daemons on 127.0.0.1 with LAN discovery off, so every
// answer comes through the DHT or gossip.
func TestWideAreaDiscovery(t *testing.T) {
	root := t.TempDir()
	bs := startBootstrap(t, filepath.Join(root, "bs"))
	n1 := startDaemon(t, "n1", filepath.Join(root, "n1"), "--bootstrap", bs)
	n2 := startDaemon(t, "n2", filepath.Join(root, "n2"), "--bootstrap", bs)
	n3 := startDaemon(t, "n3", filepath.Join(root, "n3"), "--bootstrap", bs)

	// A skill registered on n1 is discovered by capability from n3 within 10 s.
	r := cli(t, "register", "-f", repoFile(t, "examples/agentspec.yaml"), "--api", n1.api)
	if r.code != 0 {
		t.Fatalf("register: %+v", r)
	}
	n1ID := n1.health()["agent_id"].(string)
	took := eventually(t, 10*time.Second, "discovery from n3", func() bool {
		ids, _ := discoverJSON(t, n3.api, "--capability", "product.search")
		return len(ids) == 1 && strings.HasPrefix(ids[0], n1ID+"@")
	})
	t.Logf("discovered from n3 after %s", took)
	// Through the DHT alone too: n2 asks by skill and capability for
	// something only n1 offers, bypassing nothing (n2 may already know it
	// by gossip; both are fine answers, the source says which).
	ids, _ := discoverJSON(t, n2.api, "--skill", "product-search-agent", "--capability", "product.compare")
	if len(ids) != 1 {
		t.Fatalf("n2 discover by skill+capability: %v", ids)
	}

	// Forged records served by a rogue peer are rejected and counted.
	forgedKey, mismatchKey := rogue(t, bs)
	before := n3.metric(`agentd_validation_rejects_total{reason="bad_signature",transport="dht"}`)
	r = cli(t, "discover", "--api", n3.api, "--capability", forgedKey)
	if r.code == 0 {
		t.Fatalf("a forged record was returned: %s", r.stdout)
	}
	eventually(t, 10*time.Second, "bad_signature counted", func() bool {
		return n3.metric(`agentd_validation_rejects_total{reason="bad_signature",transport="dht"}`) > before
	})
	r = cli(t, "discover", "--api", n3.api, "--capability", mismatchKey)
	if r.code == 0 {
		t.Fatalf("a record naming another peer was returned: %s", r.stdout)
	}
	eventually(t, 10*time.Second, "peer_mismatch counted", func() bool {
		return n3.metric(`agentd_validation_rejects_total{reason="peer_mismatch",transport="dht"}`) > 0
	})

	// A daemon restarted without --bootstrap rejoins from its address book.
	n2.stop()
	n2.args = nil
	n2.start()
	eventually(t, 15*time.Second, "n2 rejoins without --bootstrap", func() bool {
		p, _ := n2.health()["peers"].(float64)
		return p > 0
	})
	eventually(t, 15*time.Second, "n2 discovers after the restart", func() bool {
		ids, _ := discoverJSON(t, n2.api, "--capability", "product.search")
		return len(ids) == 1
	})
}

// rogue starts an in-process libp2p peer that joins through the bootstrap
// node and provides two capabilities whose records are bad: one with a
// broken agent signature, one validly signed but naming another peer id.
func rogue(t *testing.T, bootstrap string) (forged, mismatch string) {
	t.Helper()
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	other, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.New(p2p.Config{Key: id.PeerKey, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	mk := func(signer *trust.Identity, peerID, capID string) *record.SignedAgent {
		a := &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "127.0.0.1:1"},
			Skills: []record.Skill{{SkillID: "rogue", Version: "1.0.0", SkillType: record.SkillTool, Capabilities: []record.Capability{{ID: capID}}}}}
		a.Fill(signer.AgentID, peerID, signer.PublicKeyPEM(), uint64(time.Now().UnixMilli()), time.Now(), time.Hour)
		sa, err := record.Sign(a, signer.AgentKey, signer.PeerKey)
		if err != nil {
			t.Fatal(err)
		}
		return sa
	}
	forged = fmt.Sprintf("rogue.forged.%d", time.Now().UnixNano())
	mismatch = fmt.Sprintf("rogue.mismatch.%d", time.Now().UnixNano())
	bad := mk(id, id.PeerID.String(), forged)
	bad.Signature[len(bad.Signature)-1] ^= 0xff
	foreign := mk(other, other.PeerID.String(), mismatch) // valid, but names another peer
	hosted := &rogueHosted{recs: []*record.SignedAgent{bad, foreign}, id: id}
	v, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dht.New(h, dht.Config{}, v, hosted, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	bai, err := peer.AddrInfoFromP2pAddr(ma.StringCast(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Bootstrap(ctx, []peer.AddrInfo{*bai}); err != nil {
		t.Fatal(err)
	}
	// Serve the records as they are: agentd's own record server refuses to
	// serve a record naming another peer, a rogue does not.
	h.SetStreamHandler(dht.RecordProtocol, func(s network.Stream) {
		defer func() { _ = s.Close() }()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		body, err := dht.ReadFrame(s, 4096)
		if err != nil {
			_ = s.Reset()
			return
		}
		req, nonce, err := dht.ParseRequest(body)
		if err != nil {
			_ = s.Reset()
			return
		}
		resp := dht.FetchResponse{ProtocolVersion: record.ProtocolVersion}
		for _, sa := range hosted.HostedRecords(req.Query()) {
			sig, err := id.PeerKey.Sign(dht.ChallengeBytes(nonce, s.Conn().RemotePeer(), h.ID(), sa.Canonical()))
			if err != nil {
				continue
			}
			resp.Records = append(resp.Records, dht.FetchedRecord{Announce: sa.MarshalAnnounce(), Signer: dht.SignerPeer, ChallengeSignature: base64.StdEncoding.EncodeToString(sig)})
		}
		b, _ := json.Marshal(resp)
		_ = dht.WriteFrame(s, b)
	})
	d.SetProvided(hosted.recs)
	eventually(t, 15*time.Second, "rogue provides", func() bool { return d.Status().ProvidedKeys > 0 })
	return forged, mismatch
}

type rogueHosted struct {
	recs []*record.SignedAgent
	id   *trust.Identity
}

func (r *rogueHosted) HostedRecords(q dht.FetchQuery) []*record.SignedAgent {
	var out []*record.SignedAgent
	for _, sa := range r.recs {
		if sa.Agent.Offers(q.Skill, q.Capability) {
			out = append(out, sa)
		}
	}
	return out
}

func (r *rogueHosted) SignChallenge(agentID string, msg []byte) ([]byte, bool, error) {
	if agentID != r.id.AgentID {
		return nil, false, nil
	}
	sig, err := record.SignBytes(r.id.AgentKey, msg)
	return sig, true, err
}
