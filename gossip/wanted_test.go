package gossip

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/peer"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func agentIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = uuid.NewString()
	}
	return out
}

// TestWantedWire: a beat request decodes to what was encoded; every
// malformed one is refused as malformed, naming its field; a later minor
// version decodes, flagged newer.
func TestWantedWire(t *testing.T) {
	tn := newTestNet(t, 1, testConfig())
	host := tn.nodes[0].h.ID()
	ids := agentIDs(3)
	data, err := EncodeWanted(Wanted{PeerID: host.String(), Agents: ids})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(data, 0)
	if err != nil || m.Kind != KindWanted || m.NewerMinor || m.Wanted == nil || m.Wanted.PeerID != host.String() || !slices.Equal(m.Wanted.Agents, ids) {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	if m.Agent != nil || m.Beat != nil || m.Beats != nil {
		t.Fatalf("a wanted message decoded with a record or beats: %+v", m)
	}
	if _, err := EncodeWanted(Wanted{PeerID: host.String(), Agents: agentIDs(MaxPullAgents + 1)}); !errors.Is(err, record.ErrMalformed) {
		t.Fatalf("encode %d agents: %v", MaxPullAgents+1, err)
	}

	body := func(peerID string, agents []string) string {
		return fmt.Sprintf(`{"peer_id":%q,"agents":["%s"]}`, peerID, strings.Join(agents, `","`))
	}
	ok := body(host.String(), ids)
	bad := map[string]string{
		"no agents":          fmt.Sprintf(`{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":%q,"agents":[]}}`, host),
		"too many agents":    `{"protocol_version":"v1.3","type":"wanted","wanted":` + body(host.String(), agentIDs(MaxPullAgents+1)) + `}`,
		"an agent twice":     `{"protocol_version":"v1.3","type":"wanted","wanted":` + body(host.String(), []string{ids[0], ids[0]}) + `}`,
		"not an agent id":    `{"protocol_version":"v1.3","type":"wanted","wanted":` + body(host.String(), []string{"agent-1"}) + `}`,
		"not a peer id":      `{"protocol_version":"v1.3","type":"wanted","wanted":` + body("not a peer", ids) + `}`,
		"agents not a list":  fmt.Sprintf(`{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":%q,"agents":"x"}}`, host),
		"a member in case":   fmt.Sprintf(`{"protocol_version":"v1.3","type":"wanted","wanted":{"Peer_ID":%q,"agents":["%s"]}}`, host, ids[0]),
		"no wanted":          `{"protocol_version":"v1.3","type":"wanted"}`,
		"null wanted":        `{"protocol_version":"v1.3","type":"wanted","wanted":null}`,
		"before v1.3":        `{"protocol_version":"v1.1","type":"wanted","wanted":` + ok + `}`,
		"with a beat":        `{"protocol_version":"v1.3","type":"wanted","wanted":` + ok + `,"beat":{}}`,
		"on an announcement": `{"protocol_version":"v1.3","type":"unregister","wanted":` + ok + `}`,
		"too large":          `{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":"` + host.String() + `","agents":["` + ids[0] + `"],"pad":"` + strings.Repeat("x", maxWantedBytes) + `"}}`,
	}
	for name, msg := range bad {
		_, err := Decode([]byte(msg), 0)
		if err == nil {
			t.Errorf("%s: decoded", name)
			continue
		}
		if r := trust.ReasonOf(err); r != trust.ReasonMalformed && r != trust.ReasonTooLarge {
			t.Errorf("%s: reason %s (%v), want malformed or too_large", name, r, err)
		}
	}
	// A later minor version: read, flagged newer (one warning per peer).
	later := strings.Replace(string(data), `"v1.3"`, `"v1.4"`, 1)
	if m, err := Decode([]byte(later), 0); err != nil || !m.NewerMinor || m.Kind != KindWanted {
		t.Fatalf("v1.4 request: %+v, %v", m, err)
	}
	// What a later minor adds that this one cannot parse is ignored, not
	// rejected; a malformed message of a minor this version reads is
	// rejected. (Nodes of v1.0 to v1.2 ignore a v1.3 request alike: their
	// highest minor read is 1.)
	if !newerMinor([]byte(`{"protocol_version":"v1.4","type":"wanted2"}`)) {
		t.Fatal("v1.4 is not newer than what this version reads")
	}
	if newerMinor([]byte(`{"protocol_version":"v1.3","type":"wanted2"}`)) {
		t.Fatal("v1.3 is taken for newer than what this version reads")
	}
}

// TestWantedLimit: an author's requests pass wantedPerWindow times per
// window; a new window starts over; a window counts at most
// maxWantedAuthors authors.
func TestWantedLimit(t *testing.T) {
	var l wantedLimit
	now := time.Unix(1000, 0)
	p, q := peer.ID("p"), peer.ID("q")
	for i := range wantedPerWindow {
		if !l.allow(p, now) {
			t.Fatalf("request %d of p refused", i+1)
		}
	}
	if l.allow(p, now.Add(wantedWindow-time.Millisecond)) {
		t.Fatalf("request %d of p within the window passed", wantedPerWindow+1)
	}
	if !l.allow(q, now) {
		t.Fatal("another author's first request refused")
	}
	if !l.allow(p, now.Add(wantedWindow)) {
		t.Fatal("p's first request of the next window refused")
	}
	for i := range maxWantedAuthors {
		l.allow(peer.ID(fmt.Sprint(i)), now.Add(wantedWindow))
	}
	if l.allow(peer.ID("late"), now.Add(wantedWindow)) || len(l.n) > maxWantedAuthors {
		t.Fatalf("a window counts %d authors, bound %d", len(l.n), maxWantedAuthors)
	}
}

// TestWantedReachesTheHost: in a chain A–B–C, C's request naming A
// reaches A through B, and only A acts on it; B forwards C's requests
// up to C's share of a window and drops the rest, so A gets that many.
func TestWantedReachesTheHost(t *testing.T) {
	bubble(t, func(t *testing.T) {
		type call struct {
			from   peer.ID
			agents []string
		}
		var mu sync.Mutex
		var calls []call
		cfg := testConfig()
		cfg.OnWanted = func(from peer.ID, agents []string) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{from, agents})
		}
		got := func() []call {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(calls)
		}
		tn := newTestNet(t, 3, cfg)
		a, b, c := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		tn.connect(a, b)
		tn.connect(b, c)
		waitFor(t, 10*time.Second, "the chain's meshes", func() bool {
			return len(a.g.MeshPeers(AnnounceTopic)) == 1 && len(b.g.MeshPeers(AnnounceTopic)) == 2 && len(c.g.MeshPeers(AnnounceTopic)) == 1
		})
		for _, nd := range tn.nodes {
			for _, other := range tn.nodes {
				if other != nd {
					waitFor(t, 10*time.Second, "identify", func() bool {
						protos, _ := nd.h.Peerstore().GetProtocols(other.h.ID())
						return len(protos) > 0 || nd.h.Network().Connectedness(other.h.ID()) != 1
					})
				}
			}
		}
		ids := []string{a.id.AgentID}
		sent, err := c.g.PublishWanted(tn.ctx, a.h.ID(), ids)
		if err != nil || !sent {
			t.Fatalf("PublishWanted: %v, %v", sent, err)
		}
		waitFor(t, 5*time.Second, "the request at A", func() bool { return len(got()) == 1 })
		if cl := got()[0]; cl.from != c.h.ID() || !slices.Equal(cl.agents, ids) {
			t.Fatalf("A was asked %+v, want from C for %v", cl, ids)
		}
		// C asks as often as a broken node could: B forwards C's share.
		// (The first request counts in the window.)
		for i := range wantedPerWindow + 4 {
			if _, err := c.g.PublishWanted(tn.ctx, a.h.ID(), agentIDs(1+i%3)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 5*time.Second, "B to drop C's requests past its share", func() bool {
			return rejects(t, b.m, metricsTransport, string(ReasonWantedRate)) == 5
		})
		waitFor(t, 5*time.Second, "C's share at A", func() bool { return len(got()) == wantedPerWindow })
		if n := promtest.ToFloat64(c.m.GossipPublished.WithLabelValues(KindWanted)); n != wantedPerWindow+5 {
			t.Fatalf("C counted %v requests published, want %d", n, wantedPerWindow+5)
		}
		if n := len(got()); n != wantedPerWindow {
			t.Fatalf("A was asked %d times, want %d", n, wantedPerWindow)
		}

		// A peer that sends a malformed request (two agents alike) is
		// refused as malformed by B and goes no further: its valid
		// request right after reaches A over the same B→A stream, and A
		// never saw the malformed one.
		x, pub := tn.rawPeer(t, b)
		waitFor(t, 10*time.Second, "X in B's mesh", func() bool { return slices.Contains(b.g.MeshPeers(AnnounceTopic), x.h.ID()) })
		bad := fmt.Sprintf(`{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":%q,"agents":[%q,%q]}}`, a.h.ID(), ids[0], ids[0])
		before := rejects(t, b.m, metricsTransport, "malformed")
		pub([]byte(bad))
		waitFor(t, 5*time.Second, "B to refuse the malformed request", func() bool {
			return rejects(t, b.m, metricsTransport, "malformed") > before
		})
		good, err := EncodeWanted(Wanted{PeerID: a.h.ID().String(), Agents: ids})
		if err != nil {
			t.Fatal(err)
		}
		pub(good)
		waitFor(t, 5*time.Second, "X's valid request at A", func() bool {
			c := got()
			return len(c) == wantedPerWindow+1 && c[len(c)-1].from == x.h.ID()
		})
		if n := rejects(t, a.m, metricsTransport, "malformed"); n != 0 {
			t.Fatalf("A refused %v malformed requests: B forwarded one", n)
		}
	})
}
