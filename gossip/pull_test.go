package gossip

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const pullGoldenRequest = `{"protocol_version":"v1.0","agents":["6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10"]}`

func TestPullRequestWire(t *testing.T) {
	b, err := EncodePullRequest([]string{"6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10"})
	if err != nil || string(b) != pullGoldenRequest {
		t.Fatalf("encoded (%v):\n got %s\nwant %s", err, b, pullGoldenRequest)
	}
	id := "6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10"
	var many []string
	for range MaxPullAgents + 1 {
		many = append(many, `"`+uuid.NewString()+`"`)
	}
	req := func(version string, ids ...string) string {
		return `{"protocol_version":"` + version + `","agents":[` + strings.Join(ids, ",") + `]}`
	}
	cases := []struct {
		name, in string
		reason   trust.Reason
	}{
		{"no agents", req("v1.0"), trust.ReasonMalformed},
		{"no agents member", `{"protocol_version":"v1.0"}`, trust.ReasonMalformed},
		{"too many", req("v1.0", many...), trust.ReasonMalformed},
		{"twice", req("v1.0", `"`+id+`"`, `"`+id+`"`), trust.ReasonMalformed},
		{"not an id", req("v1.0", `"not-a-uuid"`), trust.ReasonMalformed},
		{"not a string", req("v1.0", `7`), trust.ReasonMalformed},
		{"major version 2", req("v2.0", `"`+id+`"`), trust.ReasonVersion},
		{"duplicate member", `{"protocol_version":"v1.0","agents":[],"agents":["` + id + `"]}`, trust.ReasonMalformed},
		{"member case", `{"protocol_version":"v1.0","Agents":["` + id + `"]}`, trust.ReasonMalformed},
		{"too large", req("v1.0", `"`+strings.Repeat("a", maxPullRequestBytes)+`"`), trust.ReasonTooLarge},
	}
	for _, c := range cases {
		_, err := DecodePullRequest([]byte(c.in))
		if err == nil || trust.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want reason %q", c.name, err, trust.ReasonOf(err), c.reason)
		}
	}
	// A later minor version may add members; they are ignored.
	if ids, err := DecodePullRequest([]byte(`{"protocol_version":"v1.3","agents":["` + id + `"],"since":4}`)); err != nil || len(ids) != 1 {
		t.Fatalf("a v1.3 request: %v, %v", ids, err)
	}
}

func TestPullAnswerWire(t *testing.T) {
	a, b, c := uuid.NewString(), uuid.NewString(), uuid.NewString()
	entry := func(id string, seq int) string {
		return fmt.Sprintf(`{"agent_id":%q,"seq":%d,"status":"HEALTHY","timestamp":1795284263518,"interval_ms":5000}`, id, seq)
	}
	answer := func(entries ...string) string {
		return `{"protocol_version":"v1.0","beats":[` + strings.Join(entries, ",") + `]}`
	}
	beats, err := DecodePullAnswer([]byte(answer(entry(b, 9))), []string{a, b})
	if err != nil || len(beats) != 1 {
		t.Fatalf("decoded %+v, %v", beats, err)
	}
	want := record.Beat{AgentID: b, Seq: 9, Status: record.StatusHealthy, Timestamp: 1795284263518, IntervalMS: 5000}
	if beats[0] != want {
		t.Fatalf("beat %+v, want %+v", beats[0], want)
	}
	enc, err := encodePullAnswer([]record.Beat{want})
	if err != nil || string(enc) != answer(entry(b, 9)) {
		t.Fatalf("encoded (%v) %s", err, enc)
	}
	for _, tc := range []struct{ name, in string }{
		{"not asked", answer(entry(c, 1))},
		{"twice", answer(entry(a, 1), entry(a, 2))},
		{"more than asked", answer(entry(a, 1), entry(b, 1), entry(c, 1))},
		{"seq 0", answer(entry(a, 0))},
		{"bad status", answer(strings.Replace(entry(a, 1), "HEALTHY", "FINE", 1))},
		{"no timestamp", answer(fmt.Sprintf(`{"agent_id":%q,"seq":1}`, a))},
		{"not an object", `[1,`},
		{"too large", answer(strings.Repeat(" ", maxPullAnswerBytes))},
	} {
		if _, err := DecodePullAnswer([]byte(tc.in), []string{a, b}); err == nil || trust.ReasonOf(err) == "" {
			t.Errorf("%s: %v, want a classified error", tc.name, err)
		}
	}
	refusal := encodePullError(record.CodeRateLimited, "slow down")
	if _, err := DecodePullAnswer(refusal, []string{a}); !errors.Is(err, ErrPullRefused) || !strings.Contains(err.Error(), record.CodeRateLimited) {
		t.Fatalf("refusal decoded as %v", err)
	}
}

// hostedBeats is a LatestBeats shared by a test network: every node
// answers from it, and gossip answers only the beats naming the node.
type hostedBeats struct {
	mu    sync.Mutex
	beats map[string]record.Beat
}

func (h *hostedBeats) set(b record.Beat) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats[b.AgentID] = b
}

func (h *hostedBeats) latest(ids []string) []record.Beat {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []record.Beat
	for _, id := range ids {
		if b, ok := h.beats[id]; ok {
			out = append(out, b)
		}
	}
	return out
}

// pullConfig is the test configuration of nodes that serve heartbeat
// pulls from a shared hostedBeats.
func pullConfig() (*hostedBeats, Config) {
	hosted := &hostedBeats{beats: map[string]record.Beat{}}
	cfg := testConfig()
	cfg.LatestBeats = hosted.latest
	return hosted, cfg
}

func TestPull(t *testing.T) {
	bubble(t, func(t *testing.T) {
		hosted, cfg := pullConfig()
		cfg.PullServeInterval = time.Minute // no refill while the burst is spent
		tn := newTestNet(t, 3, cfg)
		a, b, liar := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		rec := a.record(t)
		if err := b.v.VerifyAgent(rec, trust.VerifyOptions{}); err != nil {
			t.Fatal(err)
		}
		b.sink.setLive(rec)
		a.seq++
		beat := record.Beat{AgentID: a.id.AgentID, PeerID: a.id.PeerID.String(), Seq: a.seq, Status: record.StatusDegraded, Timestamp: time.Now().UnixMilli(), IntervalMS: 5000}
		hosted.set(beat)
		tn.connect(a, b)
		tn.connect(liar, b)

		other := uuid.NewString() // asked for, hosted by nobody
		n, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID, other})
		if err != nil || n != 1 {
			t.Fatalf("Pull = %d, %v; want 1 beat delivered", n, err)
		}
		ds := b.sink.deliveries(func(d delivery) bool { return d.topic == PullProtocol })
		if len(ds) != 1 || ds[0].from != a.h.ID() || ds[0].kind != KindHeartbeat || ds[0].beat.Signer != record.BeatSignerBatch ||
			ds[0].beat.Beat.PeerID != a.id.PeerID.String() || ds[0].beat.Beat.Seq != beat.Seq || ds[0].beat.Beat.Status != record.StatusDegraded {
			t.Fatalf("deliveries %+v", ds)
		}
		// The same beat again is no news.
		if n, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); err != nil || n != 0 {
			t.Fatalf("second Pull = %d, %v; want 0, nil", n, err)
		}

		// A peer that answers for an agent it does not host is judged as
		// itself: the record names a's peer, so the beat is refused.
		lied := beat
		lied.PeerID, lied.Seq = liar.id.PeerID.String(), beat.Seq+100
		hosted.set(lied)
		if n, err := b.g.Pull(tn.ctx, liar.h.ID(), []string{a.id.AgentID}); err != nil || n != 0 {
			t.Fatalf("Pull from a liar = %d, %v; want nothing delivered", n, err)
		}
		if ds := b.sink.deliveries(func(d delivery) bool { return d.topic == PullProtocol }); len(ds) != 1 {
			t.Fatalf("the liar's beat was delivered: %+v", ds)
		}
		// gossip's own filter: a host answers only beats naming itself.
		if n, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); err != nil || n != 0 {
			t.Fatalf("a answered a beat naming another peer: %d, %v", n, err)
		}

		// Each asker gets PullServeBurst requests at once (three so far),
		// then a refusal.
		for i := range DefaultConfig().PullServeBurst - 3 {
			if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); err != nil {
				t.Fatalf("pull %d: %v", i, err)
			}
		}
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); !errors.Is(err, ErrPullRefused) || !strings.Contains(err.Error(), record.CodeRateLimited) {
			t.Fatalf("pull beyond the burst = %v, want rate limited", err)
		}
		// One token comes back per PullServeInterval (a minute here).
		took := testutil.EventuallyEvery(t, 2*cfg.PullServeInterval, cfg.PullServeInterval/6, "a pull served again", func() bool {
			_, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID})
			return err == nil
		})
		if took < cfg.PullServeInterval-cfg.PullServeInterval/6 {
			t.Fatalf("a pull was served again after %v, before the interval (%v)", took, cfg.PullServeInterval)
		}
		// Requests are checked: more ids than allowed never leave.
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), make([]string, MaxPullAgents+1)); err == nil {
			t.Fatal("a request of too many ids was sent")
		}
	})
}

func TestPullUnsupportedAndMalformed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig()) // LatestBeats nil: an earlier version
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(a, b)
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); !errors.Is(err, ErrPullUnsupported) {
			t.Fatalf("Pull from a node without the protocol = %v, want ErrPullUnsupported", err)
		}
		// A host that answers garbage: an error, counted, nothing delivered.
		a.h.SetStreamHandler(protocol.ID(PullProtocol), func(s network.Stream) {
			_, _ = readFrame(bufio.NewReader(s), maxPullRequestBytes)
			_ = writeFrame(s, []byte(`{"protocol_version":"v1.0","beats":[{"agent_id":"x"}]}`))
			_ = s.Close()
		})
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); err == nil || trust.ReasonOf(err) != trust.ReasonMalformed {
			t.Fatalf("Pull of a malformed answer = %v, want malformed", err)
		}
		if got := rejects(t, b.m, "pull", string(trust.ReasonMalformed)); got != 1 {
			t.Errorf("pull malformed rejects = %v, want 1", got)
		}
		// And a host that never answers: the pull gives up at PullTimeout.
		silent := make(chan struct{})
		a.h.SetStreamHandler(protocol.ID(PullProtocol), func(s network.Stream) {
			<-silent
			_ = s.Reset()
		})
		start := time.Now()
		_, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID})
		close(silent)
		if err == nil {
			t.Fatal("Pull of a silent host succeeded")
		}
		if d := time.Since(start); d != DefaultConfig().PullTimeout {
			t.Errorf("Pull of a silent host took %v, want PullTimeout (virtual time)", d)
		}
		if len(b.sink.deliveries(func(delivery) bool { return true })) != 0 {
			t.Fatal("something was delivered")
		}
	})
}

// TestPullServesMalformedRequests: a bad request gets the seed's error
// code, and the host keeps serving.
func TestPullServesMalformedRequests(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, cfg := pullConfig()
		tn := newTestNet(t, 2, cfg)
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(a, b)
		ask := func(body string) string {
			return tn.askFrame(b, a, protocol.ID(PullProtocol), body, maxPullAnswerBytes)
		}
		if got := ask(`[1,`); !strings.Contains(got, record.CodeMalformedPayload) {
			t.Fatalf("answer to [1, = %s", got)
		}
		if got := ask(`{"protocol_version":"v9.0","agents":["` + a.id.AgentID + `"]}`); !strings.Contains(got, record.CodeUnsupportedVersion) {
			t.Fatalf("answer to v9.0 = %s", got)
		}
		if got := ask(pullGoldenRequest); got != `{"protocol_version":"v1.0","beats":[]}` {
			t.Fatalf("answer to a request for an agent not hosted = %s", got)
		}
		if got := rejects(t, a.m, "pull", string(trust.ReasonMalformed)); got != 1 {
			t.Errorf("pull malformed rejects = %v, want 1", got)
		}
	})
}

// TestPullable: a topic is pullable once every peer known on it lists
// PullProtocol; a peer of an earlier version on it makes it not.
func TestPullable(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, cfg := pullConfig()
		tn := newTestNet(t, 2, cfg)
		a, b := tn.nodes[0], tn.nodes[1]
		if a.g.Pullable() {
			t.Fatal("pullable without a peer")
		}
		tn.connect(a, b)
		tn.waitTopicPeers(1)
		// Cached for pullableTTL: it turns once the cache expires.
		waitFor(t, 2*pullableTTL, "pullable with one peer that serves pulls", func() bool { return a.g.Pullable() })
		// A node of an earlier version joins the topic.
		old := tn.addHost(2)
		old.m = nil
		g, err := New(tn.ctx, old.h, testConfig(), old.v, old.sink, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Start(tn.ctx); err != nil {
			t.Fatal(err)
		}
		old.g = g
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		tn.connect(a, old)
		waitFor(t, 10*time.Second, "the old node on a's topic", func() bool { return len(a.g.announce.t.ListPeers()) == 2 })
		waitFor(t, 2*pullableTTL, "not pullable with a peer that does not serve pulls", func() bool { return !a.g.Pullable() })
	})
}
