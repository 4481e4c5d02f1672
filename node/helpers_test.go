package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bubble runs f in virtual time. Under -race the bubble runs with
// GOMAXPROCS(1), as go-libp2p-pubsub's own tests do (golang/go#78156).
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

type tnode struct {
	*Node
	id  *trust.Identity
	st  store.Store
	idx int
}

type tnet struct {
	t     *testing.T
	mn    mocknet.Mocknet
	nodes []*tnode
	cfg   Config
	// wrap, when set, wraps the host of the nodes added next.
	wrap func(host.Host) host.Host
}

// newNet starts n nodes over a mocknet with 20 ms links; node i>0
// bootstraps through node 0. Everything closes in t.Cleanup (inside the
// bubble when called from one).
func newNet(t *testing.T, n int, cfg Config) *tnet {
	t.Helper()
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: 20 * time.Millisecond})
	if cfg.Scope == "" {
		// Most tests here are about the whole network's view; the scoped
		// ones say so.
		cfg.Scope = ScopeFull
	}
	tn := &tnet{t: t, mn: mn, cfg: cfg}
	t.Cleanup(func() {
		for _, nd := range tn.nodes {
			_ = nd.Close()
			_ = nd.st.Close()
		}
		_ = mn.Close()
	})
	for range n {
		tn.add(nil, nil)
	}
	return tn
}

// add starts a node; id and st may be reused to model a restart.
func (tn *tnet) add(id *trust.Identity, st store.Store) *tnode {
	t := tn.t
	t.Helper()
	var err error
	if id == nil {
		if id, err = trust.Generate(); err != nil {
			t.Fatal(err)
		}
	}
	if st == nil {
		if st, err = store.Open(store.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	i := len(tn.nodes)
	h := tn.mn.Host(id.PeerID)
	restart := h != nil
	if restart {
		// A restart: mocknet cannot remove a peer, so cut the old host's
		// links (no peer may reach it before its new protocols exist) and
		// drop its connections; the links come back after Start.
		for _, p := range tn.mn.Peers() {
			if p != id.PeerID {
				_ = tn.mn.UnlinkPeers(id.PeerID, p)
			}
		}
		for _, c := range h.Network().Conns() {
			_ = c.Close()
		}
	} else {
		h, err = tn.mn.AddPeer(id.PeerKey, ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", i+1)))
		if err != nil {
			t.Fatal(err)
		}
	}
	if !restart {
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tn.cfg
	if len(tn.nodes) > 0 {
		b := tn.nodes[0].Host()
		cfg.Bootstrap = []peer.AddrInfo{{ID: b.ID(), Addrs: b.Addrs()}}
	}
	if tn.wrap != nil {
		h = tn.wrap(h)
	}
	nd, err := New(cfg, Options{Identity: id, Host: h, Store: st, Logger: slog.New(slog.NewTextHandler(testLogOut, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if restart {
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
	}
	tn.nodes = append(tn.nodes, &tnode{Node: nd, id: id, st: st, idx: i})
	return tn.nodes[i]
}

var waitFor = testutil.Eventually

func spec(skill string, caps ...string) *record.Agent {
	sk := record.Skill{SkillID: skill, Version: "1.2.0", SkillType: record.SkillTool, Endpoint: "10.0.0.9:8080", Scenes: []string{"auth"}}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	return &record.Agent{Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.9:9000"}, Skills: []record.Skill{sk}, Tags: []string{"tier=core"}}
}

func discoverIDs(t *testing.T, n *Node, q Query) ([]string, store.Source) {
	t.Helper()
	res, err := n.Discover(context.Background(), q)
	if err != nil {
		return nil, ""
	}
	var ids []string
	for _, r := range res {
		ids = append(ids, r.Agent.AgentID)
	}
	return ids, res[0].Source
}

func live(n *Node, agentID string) (view.Agent, bool) { return n.View().Get(agentID) }

var testLogOut io.Writer = io.Discard
