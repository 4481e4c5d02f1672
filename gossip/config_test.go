package gossip

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.MaxMessageBytes != record.MaxMessageBytes || c.SyncPeers != 3 || c.SyncLimit != 1000 || c.UnknownAgentBackoff != d.UnknownAgentBackoff {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if !d.PeerExchange || !d.FloodPublish {
		t.Fatal("DefaultConfig must turn peer exchange and flood publishing on")
	}
	tp := c.Score.Topics[AnnounceTopic]
	if tp == nil {
		t.Fatal("no score parameters for the announce topic")
	}
	if tp.MeshMessageDeliveriesWeight != 0 || tp.MeshFailurePenaltyWeight != 0 {
		t.Fatal("P3/P3b must be off on the low-rate announce topic")
	}
	if tp.InvalidMessageDeliveriesWeight >= 0 || tp.TimeInMeshWeight <= 0 || tp.FirstMessageDeliveriesWeight <= 0 {
		t.Fatalf("P1/P2/P4 weights: %+v", tp)
	}
	if c.Score.AppSpecificScore("x") != 0 {
		t.Fatal("app-specific score must be 0")
	}
	th := c.Thresholds
	if !(th.GraylistThreshold < th.PublishThreshold && th.PublishThreshold < th.GossipThreshold && th.GossipThreshold < 0 && th.AcceptPXThreshold == 0) {
		t.Fatalf("thresholds %+v", th)
	}
	// How many invalid messages it takes, with the largest positive score.
	for n, want := range map[float64]bool{5: false, 6: true} {
		score := scoreTopicCap + n*n*scoreInvalidWeight
		if graylisted := score < th.GraylistThreshold; graylisted != want {
			t.Errorf("%v invalid messages: score %v, graylisted %v", n, score, graylisted)
		}
	}

	// The caller's Score is copied, never mutated.
	user := DefaultScoreParams()
	delete(user.Topics, AnnounceTopic)
	user.AppSpecificScore = nil
	c2, err := Config{Score: user}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(user.Topics) != 0 || user.AppSpecificScore != nil {
		t.Fatal("withDefaults mutated the caller's score parameters")
	}
	if c2.Score.Topics[AnnounceTopic] == nil || c2.Score.AppSpecificScore == nil {
		t.Fatal("announce topic parameters or app score missing")
	}
	c2.Score.Topics["x"] = nil
	if c3, _ := (Config{Score: user}).withDefaults(); len(c3.Score.Topics) != 1 {
		t.Fatal("two instances share a Topics map")
	}

	for want, bad := range map[string]Config{
		"MaxMessageBytes":     {MaxMessageBytes: 10},
		"SyncPeers":           {SyncPeers: -1},
		"SyncLimit":           {SyncLimit: maxSyncLimit + 1},
		"UnknownAgentWorkers": {UnknownAgentWorkers: 1000},
	} {
		if _, err := bad.withDefaults(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}

func TestOwnNets(t *testing.T) {
	addrs := []ma.Multiaddr{
		ma.StringCast("/ip4/127.0.0.1/tcp/1"),
		ma.StringCast("/ip4/192.168.1.5/tcp/1"),
		ma.StringCast("/ip4/203.0.113.9/tcp/1"),
		ma.StringCast("/ip6/2001:db8:1:2:3:4:5:6/udp/1/quic-v1"),
		ma.StringCast("/ip6/2001:db8:1:2::9/tcp/1"),
		ma.StringCast("/ip6/fe80::1/tcp/1"),
		ma.StringCast("/dns4/example.com/tcp/1"),
	}
	var got []string
	for _, n := range ownNets(addrs) {
		got = append(got, n.String())
	}
	want := []string{"203.0.113.9/32", "2001:db8:1:2::/64"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ownNets = %v, want %v", got, want)
	}
}

// loneHost returns a mocknet host with no peer, closed at the end of the
// test, and a verifier with the default policy.
func loneHost(t *testing.T) (host.Host, *trust.Verifier) {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := trust.NewVerifier(trust.Config{}, nil)
	return h, v
}

// TestNewRejectsBadParameters: router, threshold and score parameters are
// validated at construction with errors naming the field, before pubsub
// starts anything.
func TestNewRejectsBadParameters(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h, v := loneHost(t)
		badParams := pubsub.DefaultGossipSubParams()
		badParams.D, badParams.Dhi = 20, 12
		zeroBeat := pubsub.DefaultGossipSubParams()
		zeroBeat.HeartbeatInterval = 0
		badTopic := AnnounceTopicScoreParams()
		badTopic.InvalidMessageDeliveriesWeight = 5
		badScore := DefaultScoreParams()
		badScore.Topics[AnnounceTopic] = badTopic
		badDecay := DefaultScoreParams()
		badDecay.DecayInterval = time.Millisecond
		for want, cfg := range map[string]Config{
			"Params.D=20":                  {Params: &badParams},
			"HeartbeatInterval":            {Params: &zeroBeat},
			"Thresholds.GossipThreshold":   {Thresholds: &pubsub.PeerScoreThresholds{GossipThreshold: 10}},
			"Thresholds.GraylistThreshold": {Thresholds: &pubsub.PeerScoreThresholds{GossipThreshold: -1, PublishThreshold: -2, GraylistThreshold: -1}},
			"Score.Topics[/agentd/announce/1.0.0].InvalidMessageDeliveriesWeight": {Score: badScore},
			"Score.DecayInterval":         {Score: badDecay},
			"SceneTopicScore.TopicWeight": {SceneTopicScore: &pubsub.TopicScoreParams{TopicWeight: -1}},
		} {
			g, err := New(context.Background(), h, cfg, v, newFakeSink(), metrics.New(false), nil)
			if err == nil {
				_ = g.Close()
				t.Errorf("New accepted bad %s", want)
				continue
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("New = %v, want an error naming %q", err, want)
			}
		}
		if _, err := New(context.Background(), h, DefaultConfig(), nil, newFakeSink(), nil, nil); err == nil {
			t.Error("New without a verifier")
		}
		// Partially set parameters (SkipAtomicValidation) follow pubsub's
		// rule: a group that is set must be complete.
		partial := DefaultScoreParams()
		partial.Topics["/agentd/scene/x/1.0.0"] = &pubsub.TopicScoreParams{SkipAtomicValidation: true, TopicWeight: 1, InvalidMessageDeliveriesWeight: -1}
		if _, err := New(context.Background(), h, Config{Score: partial}, v, newFakeSink(), nil, nil); err == nil || !strings.Contains(err.Error(), "InvalidMessageDeliveriesDecay") {
			t.Errorf("partial parameters: %v", err)
		}
		partial.Topics["/agentd/scene/x/1.0.0"].InvalidMessageDeliveriesDecay = 0.5
		g, err := New(context.Background(), h, Config{Score: partial}, v, newFakeSink(), nil, nil)
		if err != nil {
			t.Fatalf("complete partial parameters: %v", err)
		}
		_ = g.Close()
	})
}

// TestLifecycle: Start once, Close idempotent, errors after Close.
func TestLifecycle(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h, v := loneHost(t)
		g, err := New(context.Background(), h, DefaultConfig(), v, newFakeSink(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.PublishBeat(context.Background(), KindHeartbeat, &record.SignedBeat{Beat: record.Beat{PeerID: h.ID().String()}}); err == nil {
			t.Error("publish before Start")
		}
		if err := g.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := g.Start(context.Background()); err != ErrAlreadyStarted {
			t.Errorf("second Start = %v", err)
		}
		if got := g.TopicPeers(); len(got) != 0 {
			t.Errorf("TopicPeers = %v", got)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := g.JoinScene("auth"); err != ErrClosed {
			t.Errorf("JoinScene after Close = %v", err)
		}
		if _, err := g.Sync(context.Background()); err != ErrClosed {
			t.Errorf("Sync after Close = %v", err)
		}
	})
}

func TestMeshParams(t *testing.T) {
	def := pubsub.DefaultGossipSubParams()
	six, err := MeshParams(6)
	if err != nil {
		t.Fatal(err)
	}
	if *six != def {
		t.Errorf("MeshParams(6) = D %d Dlo %d Dhi %d Dscore %d Dout %d, pubsub's defaults are %d %d %d %d %d",
			six.D, six.Dlo, six.Dhi, six.Dscore, six.Dout, def.D, def.Dlo, def.Dhi, def.Dscore, def.Dout)
	}
	four, err := MeshParams(4)
	if err != nil {
		t.Fatal(err)
	}
	if got := [5]int{four.D, four.Dlo, four.Dhi, four.Dscore, four.Dout}; got != [5]int{4, 3, 8, 2, 1} {
		t.Errorf("MeshParams(4): D, Dlo, Dhi, Dscore, Dout = %v, want [4 3 8 2 1]", got)
	}
	// Every degree in range makes a router New and pubsub itself accept.
	bubble(t, func(t *testing.T) {
		h, v := loneHost(t)
		for d := MinMeshDegree; d <= MaxMeshDegree; d++ {
			p, err := MeshParams(d)
			if err != nil {
				t.Fatalf("MeshParams(%d): %v", d, err)
			}
			cfg := DefaultConfig()
			cfg.Params = p
			g, err := New(context.Background(), h, cfg, v, newFakeSink(), nil, nil)
			if err != nil {
				t.Fatalf("MeshParams(%d) = D %d Dlo %d Dhi %d Dscore %d Dout %d: %v", d, p.D, p.Dlo, p.Dhi, p.Dscore, p.Dout, err)
			}
			_ = g.Close()
		}
	})
	for _, d := range []int{MinMeshDegree - 1, 0, -1, MaxMeshDegree + 1} {
		if _, err := MeshParams(d); err == nil {
			t.Errorf("MeshParams(%d) accepted", d)
		}
	}
}
