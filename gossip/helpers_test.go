package gossip

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bubble runs f in a synctest bubble (virtual time). Under -race the
// bubble runs with GOMAXPROCS(1), as go-libp2p-pubsub's own tests do
// (golang/go#78156).
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

// testLogger routes slog to t.Log. It drops pubsub's "error bumping
// delivery tag" warning: mocknet hosts have no connection manager, so
// pubsub's tag tracer cannot register its decaying tags.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(dropMsg{slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}), "error bumping delivery tag"})
}

type dropMsg struct {
	slog.Handler
	msg string
}

func (d dropMsg) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == d.msg {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d dropMsg) WithAttrs(as []slog.Attr) slog.Handler {
	return dropMsg{d.Handler.WithAttrs(as), d.msg}
}
func (d dropMsg) WithGroup(n string) slog.Handler { return dropMsg{d.Handler.WithGroup(n), d.msg} }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

var _ io.Writer = tWriter{}

// ---- fake sink ----

type delivery struct {
	kind  Kind
	agent *record.SignedAgent
	beat  *record.SignedBeat
	from  peer.ID
	topic string
	heard Heard // deliveries by Synced
	at    time.Time
}

// fakeSink is the live view reduced to what gossip needs: the highest seq
// per agent, tombstones from unregisters, and the delivered messages.
type fakeSink struct {
	mu       sync.Mutex
	seq      map[string]uint64
	tomb     map[string]uint64
	live     map[string]*record.SignedAgent
	heard    map[string]Heard // what LiveRecords reports per agent (zero by default)
	got      []delivery
	unknowns []unknownReq
}

func newFakeSink() *fakeSink {
	return &fakeSink{seq: map[string]uint64{}, tomb: map[string]uint64{}, live: map[string]*record.SignedAgent{}, heard: map[string]Heard{}}
}

func (s *fakeSink) check(id string, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tomb[id]; ok && seq <= t {
		return &trust.RejectError{Reason: trust.ReasonReplay, Detail: fmt.Sprintf("seq %d covered by tombstone %d", seq, t)}
	}
	if seq <= s.seq[id] {
		return &trust.RejectError{Reason: trust.ReasonReplay, Detail: fmt.Sprintf("seq %d not newer than %d", seq, s.seq[id])}
	}
	return nil
}

func (s *fakeSink) CheckAnnounce(sa *record.SignedAgent) error {
	return s.check(sa.Agent.AgentID, sa.Agent.Seq)
}

func (s *fakeSink) CheckBeat(_ Kind, sb *record.SignedBeat) error {
	if err := s.check(sb.Beat.AgentID, sb.Beat.Seq); err != nil {
		return err
	}
	// The view's peer-signed rule: a beat that speaks for its peer counts
	// only from the peer of the agent's current record.
	s.mu.Lock()
	rec := s.live[sb.Beat.AgentID]
	s.mu.Unlock()
	if sb.PeerBound() && rec != nil && rec.Agent.PeerID != sb.Beat.PeerID {
		return &trust.RejectError{Reason: trust.ReasonPeerMismatch, Detail: "beat from " + sb.Beat.PeerID + ", the record's peer is " + rec.Agent.PeerID}
	}
	return nil
}

func (s *fakeSink) Announce(sa *record.SignedAgent, from peer.ID, topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := sa.Agent.AgentID
	s.got = append(s.got, delivery{kind: KindAnnounce, agent: sa, from: from, topic: topic, at: time.Now()})
	if sa.Agent.Seq > s.seq[id] {
		s.seq[id] = sa.Agent.Seq
		s.live[id] = sa
	}
}

func (s *fakeSink) Synced(sa *record.SignedAgent, from peer.ID, heard Heard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := sa.Agent.AgentID
	s.got = append(s.got, delivery{kind: KindAnnounce, agent: sa, from: from, topic: SyncProtocol, heard: heard, at: time.Now()})
	if sa.Agent.Seq > s.seq[id] {
		s.seq[id] = sa.Agent.Seq
		s.live[id] = sa
		s.heard[id] = heard
	}
}

func (s *fakeSink) Beat(kind Kind, sb *record.SignedBeat, from peer.ID, topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := sb.Beat.AgentID
	s.got = append(s.got, delivery{kind: kind, beat: sb, from: from, topic: topic, at: time.Now()})
	if sb.Beat.Seq > s.seq[id] {
		s.seq[id] = sb.Beat.Seq
	}
	if kind == KindUnregister {
		s.tomb[id] = max(s.tomb[id], sb.Beat.Seq)
		delete(s.live, id)
	}
}

func (s *fakeSink) UnknownAgent(agentID string, from peer.ID, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unknowns = append(s.unknowns, unknownReq{agentID: agentID, from: from})
}

func (s *fakeSink) LiveRecords(limit int, keep func(*record.Agent) bool) []LiveRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LiveRecord
	for id, sa := range s.live {
		if len(out) >= limit {
			break
		}
		if keep != nil && !keep(&sa.Agent) {
			continue
		}
		out = append(out, LiveRecord{Record: sa, Heard: s.heard[id]})
	}
	return out
}

// Holds implements RecordHolder as the live view does: the live record
// of the agent at the same seq, with the same bytes and signatures.
func (s *fakeSink) Holds(sa *record.SignedAgent) bool {
	s.mu.Lock()
	held := s.live[sa.Agent.AgentID]
	s.mu.Unlock()
	return held != nil && held.Agent.Seq == sa.Agent.Seq && held.Hash() == sa.Hash() &&
		bytes.Equal(held.Signature, sa.Signature) && bytes.Equal(held.PeerSignature, sa.PeerSignature)
}

// setLive puts a record into the live set directly (as a local view would).
func (s *fakeSink) setLive(sa *record.SignedAgent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[sa.Agent.AgentID] = sa
	s.seq[sa.Agent.AgentID] = max(s.seq[sa.Agent.AgentID], sa.Agent.Seq)
}

// deliveries returns the deliveries matching f.
func (s *fakeSink) deliveries(f func(delivery) bool) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.got {
		if f == nil || f(d) {
			out = append(out, d)
		}
	}
	return out
}

func (s *fakeSink) unknownCalls() []unknownReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unknowns)
}

// announcesOf counts announce deliveries of agent id with seq.
func (s *fakeSink) announcesOf(id string, seq uint64) []delivery {
	return s.deliveries(func(d delivery) bool {
		return d.kind == KindAnnounce && d.agent.Agent.AgentID == id && d.agent.Agent.Seq == seq
	})
}

// ---- network ----

type tnode struct {
	id   *trust.Identity
	h    host.Host
	v    *trust.Verifier
	sink *fakeSink
	m    *metrics.Metrics
	g    *Gossip
	seq  uint64
}

// testConfig is the default configuration with a fast score inspector.
func testConfig() Config {
	c := DefaultConfig()
	c.ScoreInspectPeriod = time.Second
	return c
}

type testNet struct {
	t     testing.TB
	ctx   context.Context
	mn    mocknet.Mocknet
	nodes []*tnode
}

// newTestNet creates n linked (not connected) mocknet hosts with 20 ms
// links, each running Gossip with cfg. Everything is torn down in
// t.Cleanup.
func newTestNet(t testing.TB, n int, cfg Config) *testNet {
	return newTestNetLevel(t, n, cfg, slog.LevelWarn)
}

func newTestNetLevel(t testing.TB, n int, cfg Config, level slog.Level) *testNet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: 20 * time.Millisecond})
	tn := &testNet{t: t, ctx: ctx, mn: mn}
	t.Cleanup(func() {
		for _, nd := range tn.nodes {
			if nd.g != nil {
				if err := nd.g.Close(); err != nil {
					t.Errorf("close gossip: %v", err)
				}
			}
		}
		cancel()
		if err := mn.Close(); err != nil {
			t.Errorf("close mocknet: %v", err)
		}
	})
	log := testLogger(t, level)
	for i := range n {
		nd := tn.addHost(i)
		nd.m = metrics.New(false)
		g, err := New(ctx, nd.h, cfg, nd.v, nd.sink, nd.m, log.With("node", i))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := g.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		nd.g = g
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatalf("link: %v", err)
	}
	return tn
}

// addHost adds a mocknet host with a fresh identity (no gossip).
func (tn *testNet) addHost(i int) *tnode {
	tn.t.Helper()
	id, err := trust.Generate()
	if err != nil {
		tn.t.Fatal(err)
	}
	addr := ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", i+1))
	h, err := tn.mn.AddPeer(id.PeerKey, addr)
	if err != nil {
		tn.t.Fatalf("add peer: %v", err)
	}
	v, err := trust.NewVerifier(trust.Config{Policy: trust.PolicyOpen}, nil)
	if err != nil {
		tn.t.Fatal(err)
	}
	nd := &tnode{id: id, h: h, v: v, sink: newFakeSink()}
	tn.nodes = append(tn.nodes, nd)
	return nd
}

// addLinkedHost is addHost with the new host linked to every other, so
// that it can connect (a raw peer, an attacker, an observer).
func (tn *testNet) addLinkedHost(i int) *tnode {
	tn.t.Helper()
	nd := tn.addHost(i)
	if err := tn.mn.LinkAll(); err != nil {
		tn.t.Fatalf("link: %v", err)
	}
	return nd
}

func (tn *testNet) connect(a, b *tnode) {
	tn.t.Helper()
	if _, err := tn.mn.ConnectPeers(a.h.ID(), b.h.ID()); err != nil {
		tn.t.Fatalf("connect: %v", err)
	}
}

// connectSparse connects every node to d random others (seeded).
func (tn *testNet) connectSparse(d int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	n := len(tn.nodes)
	for i := range n {
		for _, j := range r.Perm(n)[:d+1] {
			if j != i && tn.mn.Net(tn.nodes[i].h.ID()).Connectedness(tn.nodes[j].h.ID()) != network.Connected {
				tn.connect(tn.nodes[i], tn.nodes[j])
			}
		}
	}
}

// announceAll has every node announce its agent once and waits until
// every node was delivered each other node's announcement exactly once.
func (tn *testNet) announceAll(t *testing.T) {
	t.Helper()
	n := len(tn.nodes)
	for _, nd := range tn.nodes {
		if err := nd.g.PublishAnnounce(tn.ctx, nd.record(t)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	for i, nd := range tn.nodes {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to learn every agent", i), func() bool {
			return len(nd.sink.deliveries(nil)) >= n-1
		})
	}
	for i, nd := range tn.nodes {
		if got := len(nd.sink.deliveries(nil)); got != n-1 {
			t.Errorf("node %d: %d deliveries, want %d (each message delivered once)", i, got, n-1)
		}
	}
}

// waitTopicPeers waits until every gossip node sees at least min peers in
// the announce topic.
func (tn *testNet) waitTopicPeers(min int) {
	tn.t.Helper()
	waitFor(tn.t, 30*time.Second, "topic peers", func() bool {
		for _, nd := range tn.nodes {
			if nd.g != nil && len(nd.g.TopicPeers()) < min {
				return false
			}
		}
		return true
	})
}

// waitMesh waits until every gossip node's announce-topic mesh holds
// min(topic peers, Dlo) peers: the mesh has formed.
func (tn *testNet) waitMesh() {
	tn.t.Helper()
	dlo := pubsub.DefaultGossipSubParams().Dlo
	waitFor(tn.t, 30*time.Second, "mesh", func() bool {
		for _, nd := range tn.nodes {
			if nd.g != nil && len(nd.g.MeshPeers(AnnounceTopic)) < min(len(nd.g.TopicPeers()), dlo) {
				return false
			}
		}
		return true
	})
}

// waitFor polls every millisecond: the tests measure propagation in
// virtual time.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, d, time.Millisecond, what, cond)
}

// record builds and signs the node's agent record with the next seq.
func (nd *tnode) record(t testing.TB, scenes ...string) *record.SignedAgent {
	t.Helper()
	nd.seq++
	return signAgent(t, nd.id, nd.seq, scenes...)
}

func signAgent(t testing.TB, id *trust.Identity, seq uint64, scenes ...string) *record.SignedAgent {
	t.Helper()
	a := &record.Agent{
		AgentID:   id.AgentID,
		AgentName: "agent-" + id.PeerID.String()[len(id.PeerID.String())-6:],
		Transport: record.Transport{Type: "libp2p", Endpoint: "/p2p/" + id.PeerID.String()},
		Skills: []record.Skill{{
			SkillID: "skill-org", Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: "org-data-read"}},
			Scenes:       scenes,
		}},
		Seq:        seq,
		IssuedAt:   time.Now().UTC().Format(time.RFC3339Nano),
		TTLSeconds: 300,
	}
	a.SyncCapabilities()
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatalf("sign agent: %v", err)
	}
	return sa
}

// beat signs a beat of the node's agent with the next seq.
func (nd *tnode) beat(t testing.TB, kind Kind) *record.SignedBeat {
	t.Helper()
	nd.seq++
	b := record.Beat{AgentID: nd.id.AgentID, PeerID: nd.id.PeerID.String(), Seq: nd.seq, Status: record.StatusHealthy,
		Timestamp: time.Now().UnixMilli(), IntervalMS: 5000}
	if kind == KindUnregister {
		b.Reason = record.ReasonShutdown
	}
	sb, err := record.SignBeat(b, nd.id.AgentKey)
	if err != nil {
		t.Fatalf("sign beat: %v", err)
	}
	return sb
}

// rawPeer adds to tn a host that runs pubsub without agentd's validator
// (rawPubSub) on the announce topic, connects it to b, waits for the mesh,
// and returns it with a function that publishes raw bytes from it there.
func (tn *testNet) rawPeer(t *testing.T, b *tnode) (x *tnode, pub func([]byte)) {
	t.Helper()
	x = tn.addLinkedHost(len(tn.nodes))
	topics, stop := rawPubSub(t, tn.ctx, x.h, AnnounceTopic)
	t.Cleanup(stop)
	tn.connect(b, x)
	tn.waitTopicPeers(1)
	tn.waitMesh()
	return x, func(data []byte) {
		t.Helper()
		if err := topics[AnnounceTopic].Publish(tn.ctx, data); err != nil {
			t.Fatalf("raw publish: %v", err)
		}
	}
}

// knownRawPeer is rawPeer whose agent's record has reached b: b holds
// its key pinned and the record in its sink.
func (tn *testNet) knownRawPeer(t *testing.T, b *tnode) (x *tnode, pub func([]byte), rec *record.SignedAgent) {
	t.Helper()
	x, pub = tn.rawPeer(t, b)
	rec = x.record(t)
	data, err := EncodeAnnounce(rec)
	if err != nil {
		t.Fatal(err)
	}
	pub(data)
	waitFor(t, 5*time.Second, "X's record at B", func() bool { return len(b.sink.announcesOf(x.id.AgentID, rec.Agent.Seq)) == 1 })
	return x, pub, rec
}

// rawPubSub starts a GossipSub router on h without agentd's validator:
// what an attacker (or another implementation) runs.
func rawPubSub(t *testing.T, ctx context.Context, h host.Host, topics ...string) (map[string]*pubsub.Topic, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageIdFn(MessageID), pubsub.WithFloodPublish(true),
		pubsub.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("raw pubsub: %v", err)
	}
	out := map[string]*pubsub.Topic{}
	for _, tp := range topics {
		top, err := ps.Join(tp)
		if err != nil {
			t.Fatalf("raw join: %v", err)
		}
		if _, err := top.Relay(); err != nil { // announce the subscription
			t.Fatalf("raw relay: %v", err)
		}
		out[tp] = top
	}
	return out, cancel
}

// rejects reads agentd_validation_rejects_total{transport,reason} from the
// node's registry.
func rejects(t *testing.T, m *metrics.Metrics, transport, reason string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != "agentd_validation_rejects_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["transport"] == transport && labels["reason"] == reason {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// delivered reads agentd_gossip_delivered_total{type}.
func delivered(t *testing.T, m *metrics.Metrics, kind string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != "agentd_gossip_delivered_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == kind {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// percentile returns the p-th percentile (nearest rank) of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// never fails if cond becomes true within d of (virtual) time: the bound
// of a negative assertion.
func never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("%s happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// askFrame opens a stream of proto from one node to another, sends body as
// one frame and returns the answer frame (at most max bytes).
func (tn *testNet) askFrame(from, to *tnode, proto protocol.ID, body string, max int) string {
	tn.t.Helper()
	s, err := from.h.NewStream(tn.ctx, to.h.ID(), proto)
	if err != nil {
		tn.t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if err := writeFrame(s, []byte(body)); err != nil {
		tn.t.Fatal(err)
	}
	ans, err := readFrame(bufio.NewReader(s), max)
	if err != nil {
		tn.t.Fatal(err)
	}
	return string(ans)
}
