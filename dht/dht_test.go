package dht

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multihash"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-log's and opencensus' process-wide workers start on import.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/ipfs/go-log/v2/writer.(*MirrorWriter).logRoutine"),
	)
}

func findCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFound polls Find from n until it returns a record of agent.
func waitFound(t *testing.T, n *node, skill, capability, agent string) []Found {
	t.Helper()
	var got []Found
	eventually(t, 20*time.Second, "Find("+skill+","+capability+") to return "+agent, func() bool {
		fs, err := n.d.Find(findCtx(t), skill, capability, 0)
		if err != nil {
			return false
		}
		for _, f := range fs {
			if f.Record.Agent.AgentID == agent {
				got = fs
				return true
			}
		}
		return false
	})
	return got
}

func TestProvideThenFindFromEveryNode(t *testing.T) {
	c := newCluster(t, 10, 0, nil)
	prov := c.nodes[3]
	sa := prov.host(t, 1, skillSpec{"skill-org-feishu": {"org-data-read", "org-data-write"}})

	// The provide is asynchronous: wait until every key reached the other
	// nodes (with ten nodes all are among the k closest), then ask every
	// node for every form of the key.
	eventually(t, 20*time.Second, "all five keys provided", func() bool {
		st := prov.d.Status()
		return st.ProvidedKeys == 5 && st.LastProvideMin >= len(c.nodes)-1 && st.PendingRetries == 0
	})
	waitFound(t, c.nodes[7], "skill-org-feishu", "org-data-read", prov.id.AgentID)
	for i, n := range c.nodes {
		if n == prov {
			continue
		}
		for _, q := range [][2]string{
			{"skill-org-feishu", "org-data-read"},
			{"", "org-data-write"},   // capability-only key
			{"skill-org-feishu", ""}, // skill-only key
		} {
			fs, err := n.d.Find(findCtx(t), q[0], q[1], 5)
			if err != nil {
				t.Fatalf("node %d Find(%q,%q): %v", i, q[0], q[1], err)
			}
			if len(fs) != 1 {
				t.Fatalf("node %d Find(%q,%q) = %d results, want 1", i, q[0], q[1], len(fs))
			}
			f := fs[0]
			if f.Provider != prov.h.ID() || !f.Fetched || f.Record.Agent.AgentID != sa.Agent.AgentID || string(f.Record.Canonical()) != string(sa.Canonical()) {
				t.Fatalf("node %d got %+v, want the provider's record fetched from %s", i, f, prov.h.ID())
			}
			if f.Latency <= 0 {
				t.Fatalf("node %d: fetched result has no latency", i)
			}
		}
	}
	// A capability nobody offers finds nothing, without error.
	fs, err := c.nodes[1].d.Find(findCtx(t), "skill-org-feishu", "org-admin", 5)
	if err != nil || len(fs) != 0 {
		t.Fatalf("Find(unoffered) = %v, %v; want nothing", fs, err)
	}
	if got := fetches(c.nodes[7].m, "ok"); got < 1 {
		t.Fatalf("fetch ok counter = %v", got)
	}
	st := prov.d.Status()
	if st.ProvidedKeys != 5 || st.PublishedValues != 2 || st.LastProvideMin < 1 {
		t.Fatalf("provider status %+v: want 5 keys, 2 values, every key stored remotely", st)
	}
}

func TestFindLimitAndManyProviders(t *testing.T) {
	c := newCluster(t, 8, 0, nil)
	for _, n := range c.nodes[1:6] {
		n.host(t, 1, skillSpec{"skill-search": {"web-search"}})
	}
	q := c.nodes[7]
	eventually(t, 20*time.Second, "5 providers found", func() bool {
		fs, err := q.d.Find(findCtx(t), "skill-search", "web-search", 0)
		return err == nil && len(fs) == 5
	})
	fs, err := q.d.Find(findCtx(t), "skill-search", "web-search", 2)
	if err != nil || len(fs) != 2 {
		t.Fatalf("Find limit 2 = %d results, %v", len(fs), err)
	}
	seen := map[string]bool{}
	for _, f := range fs {
		if seen[f.Record.Agent.AgentID] {
			t.Fatalf("duplicate agent %s", f.Record.Agent.AgentID)
		}
		seen[f.Record.Agent.AgentID] = true
	}
}

func TestDeadProviderIsNotReturned(t *testing.T) {
	c := newCluster(t, 6, 0, nil)
	prov, q := c.nodes[2], c.nodes[4]
	prov.host(t, 1, skillSpec{"skill-x": {"cap-x"}})
	waitFound(t, q, "skill-x", "cap-x", prov.id.AgentID)
	// Wait until the querier itself stores the provider record (with six
	// nodes every node is among the k closest), so the DHT surely still
	// points at the provider after it dies.
	mh := record.SkillKey("skill-x", "cap-x").CID().Hash()
	qkad, _, _ := q.d.running()
	eventually(t, 10*time.Second, "provider record stored on the querier", func() bool {
		ps, _ := qkad.ProviderStore().GetProviders(findCtx(t), mh)
		for _, p := range ps {
			if p.ID == prov.h.ID() {
				return true
			}
		}
		return false
	})

	// The provider dies; its provider records stay on the DHT servers
	// until they expire, but Find must not return it.
	if err := prov.d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := prov.h.Close(); err != nil {
		t.Fatal(err)
	}
	provs, _ := qkad.FindProviders(findCtx(t), record.SkillKey("skill-x", "cap-x").CID())
	stale := false
	for _, p := range provs {
		stale = stale || p.ID == prov.h.ID()
	}
	if !stale {
		t.Fatal("the dead provider's record should still be on the DHT (this test would prove nothing)")
	}
	fs, err := q.d.Find(findCtx(t), "skill-x", "cap-x", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("dead provider returned: %+v", fs)
	}
	if fetches(q.m, "error")+fetches(q.m, "timeout") < 1 {
		t.Fatal("the failed fetch was not counted")
	}
}

// serveRaw replaces n's record handler with f, which answers any request.
func serveRaw(n *node, f func(req *FetchRequest, nonce []byte, remote peer.ID) []byte) {
	n.h.SetStreamHandler(RecordProtocol, func(s network.Stream) {
		defer func() { _ = s.Close() }()
		body, err := ReadFrame(s, MaxRequestBytes)
		if err != nil {
			_ = s.Reset()
			return
		}
		req, nonce, err := ParseRequest(body)
		if err != nil {
			_ = s.Reset()
			return
		}
		_ = WriteFrame(s, f(req, nonce, s.Conn().RemotePeer()))
	})
}

func respond(recs ...FetchedRecord) []byte {
	b, _ := json.Marshal(FetchResponse{ProtocolVersion: "v1.0", Records: recs})
	return b
}

// agentSigned answers with sa and an agent-key challenge signature by id.
func agentSigned(t *testing.T, sa *record.SignedAgent, id *trust.Identity, nonce []byte, requester, responder peer.ID) FetchedRecord {
	sig, err := record.SignBytes(id.AgentKey, ChallengeBytes(nonce, requester, responder, sa.Canonical()))
	if err != nil {
		t.Error(err)
	}
	return FetchedRecord{Announce: sa.MarshalAnnounce(), Signer: SignerAgent, ChallengeSignature: base64.StdEncoding.EncodeToString(sig)}
}

func TestForgedAndMisboundRecordsAreRejected(t *testing.T) {
	c := newCluster(t, 6, 0, nil)
	forger, thief, q := c.nodes[1], c.nodes[2], c.nodes[5]

	// Both advertise the key honestly first (so the DHT has their provider
	// records), then answer fetches with bad records.
	good := forger.host(t, 1, skillSpec{"skill-pay": {"pay"}})
	thief.host(t, 1, skillSpec{"skill-pay": {"pay"}})
	waitFound(t, q, "skill-pay", "pay", forger.id.AgentID)
	waitFound(t, q, "skill-pay", "pay", thief.id.AgentID)

	// The forger's record with a broken agent signature.
	forged := good.Clone()
	forged.Signature = append([]byte{}, good.Signature...)
	forged.Signature[len(forged.Signature)/2] ^= 0xff
	serveRaw(forger, func(_ *FetchRequest, nonce []byte, remote peer.ID) []byte {
		return respond(agentSigned(t, forged, forger.id, nonce, remote, forger.h.ID()))
	})
	// The thief serves someone else's valid record (naming another peer id).
	victim := mustIdentity(t)
	stolen := signedAgent(t, victim, 1, skillSpec{"skill-pay": {"pay"}})
	serveRaw(thief, func(_ *FetchRequest, nonce []byte, remote peer.ID) []byte {
		return respond(agentSigned(t, stolen, victim, nonce, remote, thief.h.ID()))
	})

	fs, err := q.d.Find(findCtx(t), "skill-pay", "pay", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("bad records returned: %+v", fs)
	}
	if got := rejects(q.m, string(trust.ReasonBadSignature)); got < 1 {
		t.Fatalf("bad_signature rejects = %v", got)
	}
	if got := rejects(q.m, string(trust.ReasonPeerMismatch)); got < 1 {
		t.Fatalf("peer_mismatch rejects = %v", got)
	}
	if got := fetches(q.m, "rejected"); got < 2 {
		t.Fatalf("rejected fetches = %v, want 2", got)
	}
	// Fetch reports the cause.
	_, err = q.d.Fetch(findCtx(t), forger.info(), FetchQuery{Skill: "skill-pay"})
	if !errors.Is(err, ErrRejected) || trust.ReasonOf(err) != trust.ReasonBadSignature {
		t.Fatalf("Fetch(forger) err = %v, want ErrRejected with bad_signature", err)
	}
}

func TestRecordNotOfferingCapabilityIsDropped(t *testing.T) {
	c := newCluster(t, 5, 0, nil)
	liar, q := c.nodes[1], c.nodes[3]
	liar.host(t, 1, skillSpec{"skill-a": {"cap-a"}})
	waitFound(t, q, "skill-a", "cap-a", liar.id.AgentID)

	// The liar keeps advertising cap-a but its record now offers only cap-b.
	other := signedAgent(t, liar.id, 2, skillSpec{"skill-a": {"cap-b"}})
	serveRaw(liar, func(_ *FetchRequest, nonce []byte, remote peer.ID) []byte {
		return respond(agentSigned(t, other, liar.id, nonce, remote, liar.h.ID()))
	})
	fs, err := q.d.Find(findCtx(t), "skill-a", "cap-a", 5)
	if err != nil || len(fs) != 0 {
		t.Fatalf("Find = %+v, %v; want nothing", fs, err)
	}
	if got := rejects(q.m, ReasonNotOffered); got < 1 {
		t.Fatalf("not_offered rejects = %v", got)
	}
}

func TestChallengeResponseReplayFails(t *testing.T) {
	c := newCluster(t, 4, 0, nil)
	prov, q := c.nodes[1], c.nodes[2]
	prov.host(t, 1, skillSpec{"skill-r": {"cap-r"}})
	waitFound(t, q, "skill-r", "cap-r", prov.id.AgentID)

	// Capture a genuine response to a first nonce.
	resp, nonce1, err := q.d.roundTrip(findCtx(t), prov.info(), FetchQuery{Skill: "skill-r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Records) != 1 {
		t.Fatalf("captured %d records", len(resp.Records))
	}
	if _, reason, err := q.d.checkRecord(&resp.Records[0], nonce1, prov.h.ID(), FetchQuery{Skill: "skill-r"}); err != nil {
		t.Fatalf("genuine response rejected (%s): %v", reason, err)
	}
	// The same bytes against another nonce fail.
	nonce2 := append([]byte{}, nonce1...)
	nonce2[0] ^= 1
	if _, reason, err := q.d.checkRecord(&resp.Records[0], nonce2, prov.h.ID(), FetchQuery{Skill: "skill-r"}); !errors.Is(err, ErrBadChallenge) || reason != ReasonBadChallenge {
		t.Fatalf("replay against a new nonce: reason %q err %v", reason, err)
	}
	// And end to end: the provider replays the captured response to every
	// new request.
	captured := respond(resp.Records...)
	serveRaw(prov, func(*FetchRequest, []byte, peer.ID) []byte { return captured })
	_, err = q.d.Fetch(findCtx(t), prov.info(), FetchQuery{Skill: "skill-r"})
	if !errors.Is(err, ErrRejected) || !errors.Is(err, ErrBadChallenge) {
		t.Fatalf("Fetch of a replayed response: %v", err)
	}
	if got := rejects(q.m, ReasonBadChallenge); got < 1 {
		t.Fatalf("bad_challenge rejects = %v", got)
	}
	// A response captured by another requester fails too: the requester's
	// peer id is part of the challenge.
	if _, _, err := c.nodes[3].d.checkRecord(&resp.Records[0], nonce1, prov.h.ID(), FetchQuery{}); !errors.Is(err, ErrBadChallenge) {
		t.Fatalf("response replayed to another requester: %v", err)
	}
}

func TestPeerSignerWhenAgentKeyIsNotHeld(t *testing.T) {
	c := newCluster(t, 3, 0, nil)
	prov, q := c.nodes[1], c.nodes[2]
	sa := signedAgent(t, prov.id, 1, skillSpec{"skill-p": {"cap-p"}})
	prov.hosted.set([]*record.SignedAgent{sa}) // no agent key: the peer key signs
	resp, nonce, err := q.d.roundTrip(findCtx(t), prov.info(), FetchQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Records) != 1 || resp.Records[0].Signer != SignerPeer {
		t.Fatalf("response %+v: want one record signed by the peer key", resp)
	}
	if _, reason, err := q.d.checkRecord(&resp.Records[0], nonce, prov.h.ID(), FetchQuery{}); err != nil {
		t.Fatalf("peer-signed challenge rejected (%s): %v", reason, err)
	}
	// A peer signature presented as an agent signature does not verify.
	resp.Records[0].Signer = SignerAgent
	if _, _, err := q.d.checkRecord(&resp.Records[0], nonce, prov.h.ID(), FetchQuery{}); !errors.Is(err, ErrBadChallenge) {
		t.Fatalf("signer swap: %v", err)
	}
}

func TestFindUsesLiveViewInsteadOfFetching(t *testing.T) {
	var live func(peer.ID) []*record.SignedAgent
	c := newCluster(t, 5, 0, func(i int, cfg *Config) {
		if i == 4 {
			cfg.Live = func(p peer.ID) []*record.SignedAgent { return live(p) }
		}
	})
	prov, q := c.nodes[2], c.nodes[4]
	sa := prov.host(t, 1, skillSpec{"skill-l": {"cap-l"}})
	live = func(p peer.ID) []*record.SignedAgent {
		if p == prov.h.ID() {
			return []*record.SignedAgent{sa}
		}
		return nil
	}
	fs := waitFound(t, q, "skill-l", "cap-l", prov.id.AgentID)
	if len(fs) != 1 || fs[0].Fetched || fs[0].Provider != prov.h.ID() {
		t.Fatalf("Find = %+v; want the live record, not fetched", fs)
	}
	if got := fetches(prov.m, "serve_served"); got != 0 {
		t.Fatalf("provider served %v fetches; the live view should have answered", got)
	}
}

func TestGetRecordWithoutConnectionToOwner(t *testing.T) {
	c := newCluster(t, 8, 0, nil)
	owner, asker := c.nodes[2], c.nodes[6]
	sa := owner.host(t, 1, skillSpec{"skill-g": {"cap-g"}})
	eventually(t, 20*time.Second, "values published", func() bool {
		st := owner.d.Status()
		return st.PublishedValues == 2 && st.PendingRetries == 0 && st.QueuedPuts == 0
	})
	// Cut the asker off from the owner entirely.
	if err := c.mn.UnlinkPeers(owner.h.ID(), asker.h.ID()); err != nil {
		t.Fatal(err)
	}
	_ = c.mn.DisconnectPeers(owner.h.ID(), asker.h.ID())
	for _, id := range []string{owner.h.ID().String(), owner.id.AgentID} {
		got, err := asker.d.GetRecord(findCtx(t), id)
		if err != nil {
			t.Fatalf("GetRecord(%s): %v", id, err)
		}
		if string(got.Canonical()) != string(sa.Canonical()) {
			t.Fatalf("GetRecord(%s) returned another record", id)
		}
	}
	if asker.h.Network().Connectedness(owner.h.ID()) == network.Connected {
		t.Fatal("asker is connected to the owner; the test proves nothing")
	}
	// A newer record replaces the value (highest seq wins).
	sa2 := owner.host(t, 2, skillSpec{"skill-g": {"cap-g", "cap-h"}})
	eventually(t, 20*time.Second, "seq 2 visible", func() bool {
		got, err := asker.d.GetRecord(findCtx(t), owner.id.AgentID)
		return err == nil && got.Agent.Seq == sa2.Agent.Seq
	})
	// Unknown ids are not found; malformed ids name the field.
	if _, err := asker.d.GetRecord(findCtx(t), mustIdentity(t).AgentID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetRecord(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := asker.d.GetRecord(findCtx(t), "not-an-id"); record.FieldOf(err) != "id" {
		t.Fatalf("GetRecord(malformed) = %v, want a field error on id", err)
	}
}

func TestUnregisterStopsProviding(t *testing.T) {
	c := newCluster(t, 4, 0, nil)
	prov := c.nodes[1]
	prov.host(t, 1, skillSpec{"skill-u": {"cap-u"}})
	eventually(t, 10*time.Second, "keys provided", func() bool { return prov.d.Status().ProvidedKeys == 3 })
	prov.d.SetProvided(nil)
	eventually(t, 10*time.Second, "keys dropped", func() bool {
		st := prov.d.Status()
		return st.ProvidedKeys == 0 && st.PublishedValues == 0
	})
}

func TestClientModeNodeFindsAndIsNotInRoutingTables(t *testing.T) {
	c := newCluster(t, 5, 0, func(i int, cfg *Config) { cfg.ClientMode = i == 4 })
	client := c.nodes[4]
	prov := c.nodes[1]
	prov.host(t, 1, skillSpec{"skill-c": {"cap-c"}})
	waitFound(t, client, "skill-c", "cap-c", prov.id.AgentID)
	for i, n := range c.nodes[:4] {
		kad, _, _ := n.d.running()
		if kad.RoutingTable().Find(client.h.ID()) != "" {
			t.Fatalf("node %d has the client-mode node in its routing table", i)
		}
	}
	if !client.d.Status().ClientMode {
		t.Fatal("status does not report client mode")
	}
}

func TestBootstrapErrors(t *testing.T) {
	c := newCluster(t, 2, 0, nil)
	n := c.nodes[1]
	if err := n.d.Bootstrap(findCtx(t), nil); !errors.Is(err, ErrNoBootstrapPeers) {
		t.Fatalf("Bootstrap(nil) = %v", err)
	}
	ghost := mustIdentity(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := n.d.Bootstrap(ctx, []peer.AddrInfo{{ID: ghost.PeerID}})
	if !errors.Is(err, ErrNoBootstrapPeers) {
		t.Fatalf("Bootstrap(unreachable) = %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	c := newCluster(t, 1, 0, nil)
	id := mustIdentity(t)
	h, err := c.mn.AddPeer(id.PeerKey, c.nodes[0].h.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(h, Config{}, newVerifier(t), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Find(findCtx(t), "s", "c", 1); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Find before Start = %v", err)
	}
	if d.RoutingTableSize() != 0 {
		t.Fatal("routing table before Start")
	}
	if err := d.Start(findCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(findCtx(t)); err == nil {
		t.Fatal("second Start succeeded")
	}
	if _, err := d.Find(findCtx(t), "", "", 1); !errors.Is(err, ErrEmptyQuery) {
		t.Fatalf("Find empty = %v", err)
	}
	if _, err := d.Find(findCtx(t), "bad id", "", 1); record.FieldOf(err) != "skill" {
		t.Fatalf("Find bad skill = %v", err)
	}
	for range 2 {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Find(findCtx(t), "s", "c", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Find after Close = %v", err)
	}
	if err := d.Start(findCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, c := range map[string]Config{
		"reprovide too slow": {ProvideValidity: time.Minute, ReprovideInterval: 40 * time.Second},
		"republish too slow": {ValueMaxAge: time.Minute, RepublishInterval: 21 * time.Second},
		"negative timeout":   {FetchTimeout: -1},
		"too many providers": {MaxProviders: 5000},
		"no stored values":   {MaxStoredValues: -1},
		"bad own agent":      {OwnAgentID: "x"},
		"bad burst":          {ServeBurst: -1},
	} {
		c.setDefaults()
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var c Config
	c.setDefaults()
	if err := c.validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if c.ProvideValidity != 10*time.Minute || c.ReprovideInterval != 3*time.Minute || c.ValueMaxAge != 3*time.Hour ||
		c.RepublishInterval != time.Hour || c.QueryTimeout != 10*time.Second || c.FetchTimeout != 5*time.Second ||
		c.MaxProviders != 20 || c.MaxConcurrentFetch != 8 {
		t.Fatalf("defaults changed: %+v", c)
	}
}

// Provide and Unprovide change one record at a time, and a key two records
// share stays provided while either wants it.
func TestProvideIsIncremental(t *testing.T) {
	c := newCluster(t, 3, 0, nil)
	prov := c.nodes[1]
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rec := func(agentID string, seq uint64, skill string, caps ...string) *record.SignedAgent {
		a := &record.Agent{AgentID: agentID, Capabilities: map[string]string{}, Transport: record.Transport{Type: "libp2p"},
			Seq: seq, IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 3600}
		s := record.Skill{SkillID: skill, Version: "1.0.0", SkillType: record.SkillTool}
		for _, c := range caps {
			s.Capabilities = append(s.Capabilities, record.Capability{ID: c})
		}
		a.Skills = []record.Skill{s}
		sa, err := id.Sign(a)
		if err != nil {
			t.Fatal(err)
		}
		return sa
	}
	const aID, bID = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	a := rec(aID, 1, "s1", "c1", "c2") // s1:c1 s1:c2 *:c1 *:c2 s1:*
	b := rec(bID, 1, "s2", "c2")       // s2:c2 *:c2 s2:*   (*:c2 shared)
	want := func(what string, keys, values int) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() bool {
			st := prov.d.Status()
			return st.ProvidedKeys == keys && st.PublishedValues == values
		})
	}
	prov.d.Provide(a)
	prov.d.Provide(b)
	want("both records", 7, 2) // two agent values; the peer value needs a record naming this host
	prov.d.Unprovide(aID)
	want("b alone, *:c2 kept", 3, 1)
	prov.d.Provide(rec(bID, 2, "s2", "c2"))
	want("b updated, same keys", 3, 1)
	prov.d.Unprovide(aID) // twice: nothing changes
	prov.d.SetProvided([]*record.SignedAgent{a})
	want("replaced by a alone", 5, 1)
	prov.d.Unprovide(aID)
	want("nothing", 0, 0)
}

// A provide that reaches fewer than half of the closest peers is retried:
// a lookup ends once the few peers closest to the key have answered, so a
// record the closest ones missed would go unfound until the next
// reprovide. Here the provider's ADD_PROVIDER reaches one peer of nine
// until the others accept again; then every key is provided to all, and
// every node finds the agent.
func TestProvideToFewClosestPeersIsRetried(t *testing.T) {
	c := newCluster(t, 10, 0, nil)
	prov := c.nodes[3]
	accepting := c.nodes[5].h.ID()
	var missing atomic.Bool
	missing.Store(true)
	var refused atomic.Int64
	_, pm, err := prov.d.running()
	if err != nil {
		t.Fatal(err)
	}
	prov.d.mu.Lock()
	prov.d.addProvider = func(ctx context.Context, p peer.ID, key multihash.Multihash, self peer.AddrInfo) error {
		if missing.Load() && p != accepting {
			refused.Add(1)
			return errors.New("test: this peer misses the provide")
		}
		return pm.PutProviderAddrs(ctx, p, key, self)
	}
	prov.d.mu.Unlock()
	partial := func() float64 { return counterValue(prov.m.Provides.WithLabelValues("partial")) }
	sa := prov.host(t, 1, skillSpec{"skill-few": {"cap-few"}})
	eventually(t, 20*time.Second, "the provides that reached one peer counted as partial and pending a retry", func() bool {
		return partial() >= 3 && prov.d.Status().PendingRetries > 0
	})
	if prov.d.Status().LastProvideMin > 1 {
		t.Fatalf("a provide reached %d peers while all but one refused", prov.d.Status().LastProvideMin)
	}
	missing.Store(false)
	eventually(t, 30*time.Second, "every key provided to all peers after the retries", func() bool {
		st := prov.d.Status()
		return st.PendingRetries == 0 && st.LastProvideMin >= len(c.nodes)-1
	})
	for i, n := range c.nodes {
		if n == prov {
			continue
		}
		fs, err := n.d.Find(findCtx(t), "skill-few", "cap-few", 5)
		if err != nil || len(fs) != 1 || fs[0].Record.Agent.AgentID != sa.Agent.AgentID {
			t.Fatalf("node %d: %d results, %v", i, len(fs), err)
		}
	}
	t.Logf("refused ADD_PROVIDERs: %d, partial provides: %.0f", refused.Load(), partial())
}
