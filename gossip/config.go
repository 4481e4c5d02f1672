package gossip

import (
	"fmt"
	"net"
	"time"

	"github.com/agentd/agentd/record"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Config configures a Gossip instance. Start from DefaultConfig; the zero
// value of a field means its default, except for the two booleans, which
// DefaultConfig sets.
type Config struct {
	// MaxMessageBytes bounds one pubsub payload (default
	// record.MaxMessageBytes, 64 KiB). Larger messages are rejected.
	MaxMessageBytes int
	// PeerExchange sends and accepts peer exchange on PRUNE (default true),
	// so nodes that only know a bootstrap node learn mesh peers at once.
	PeerExchange bool
	// FloodPublish sends this node's own messages to every topic peer above
	// the publish threshold, not just the mesh (default true): lowest
	// latency for a low-rate topic.
	FloodPublish bool
	// Params are the GossipSub router parameters; nil means
	// pubsub.DefaultGossipSubParams(), copied for this instance.
	Params *pubsub.GossipSubParams
	// Score are the peer-score parameters; nil means DefaultScoreParams().
	// The announce topic gets AnnounceTopicScoreParams() unless Score.Topics
	// has an entry for it; scene topics get SceneTopicScore.
	Score *pubsub.PeerScoreParams
	// Thresholds are the score thresholds; nil means DefaultThresholds().
	Thresholds *pubsub.PeerScoreThresholds
	// SceneTopicScore scores scene topics; nil means
	// AnnounceTopicScoreParams().
	SceneTopicScore *pubsub.TopicScoreParams
	// ScoreInspectPeriod is how often PeerScores is refreshed (default 5 s).
	ScoreInspectPeriod time.Duration

	// SyncPeers is how many neighbours Sync asks (default 3).
	SyncPeers int
	// SyncLimit is the most records one sync answer carries, and the most
	// this node asks for (default 1000).
	SyncLimit int
	// SyncTimeout bounds one sync exchange, both ways (default 10 s).
	SyncTimeout time.Duration
	// SyncServeInterval and SyncServeBurst rate-limit the sync requests
	// served to one peer (default one per 5 s, burst 3).
	SyncServeInterval time.Duration
	SyncServeBurst    int
	// SyncServeConcurrency bounds the sync requests served at once
	// (default 8); more are refused.
	SyncServeConcurrency int

	// UnknownAgentBackoff is the shortest time between two Sink.UnknownAgent
	// calls for one agent (default 4 s, under the 5 s heartbeat interval so
	// a failed fetch is retried on the next beat).
	UnknownAgentBackoff time.Duration
	// UnknownAgentWorkers is how many Sink.UnknownAgent calls may run at
	// once (default 4); calls beyond the queue (256) are dropped and retried
	// on a later beat.
	UnknownAgentWorkers int

	// LatestBeats returns the newest heartbeat this node published for each
	// of the given agents it hosts (agents it does not host are left out);
	// it answers heartbeat pulls (PullProtocol). Nil: the node does not
	// serve them. It must be fast and must not block.
	LatestBeats func(agentIDs []string) []record.Beat
	// PullTimeout bounds one heartbeat pull, both ways (default 3 s).
	PullTimeout time.Duration
	// PullServeInterval and PullServeBurst rate-limit the heartbeat pulls
	// served to one peer (default one per 500 ms, bursts of 10);
	// PullServeConcurrency bounds those served at once (default 16).
	PullServeInterval    time.Duration
	PullServeBurst       int
	PullServeConcurrency int

	// MaxScenes bounds the scene topics this node joins (default 64).
	MaxScenes int
	// Scoped makes the node keep to its interest: it does not subscribe to
	// the announce topic (only while a peer of the previous protocol
	// version does, see the package doc), and it hears agents on the shard
	// topics it joins with JoinShard. Unscoped nodes subscribe to the
	// announce topic and hear the whole network.
	Scoped bool
	// DisableBatches makes the node send every heartbeat alone and not
	// list BatchProtocol, as a node of protocol v1.0 does (it still reads
	// the batches it gets). For tests of mixed versions; off by default.
	DisableBatches bool
	// DisableResends makes the node behave as one of protocol v1.1 toward
	// resent announcements: it does not list ResendProtocol, signs a record
	// again where it would resend it, and takes a resend like any
	// announcement (one it holds is a replay: ignored, not forwarded). For
	// tests of mixed versions; off by default.
	DisableResends bool
	// OnWanted, when set, is called with the agents a peer's beat request
	// (KindWanted, protocol v1.3) asks this host to put on gossip: the
	// peer cannot pull their heartbeats. Setting it makes the node list
	// WantedProtocol; a host then keeps the heartbeats of agents nobody
	// asked for off gossip on topics whose every known peer lists it
	// (Requestable). Called from a topic's delivery loop; it must not
	// block. nil models a node of protocol v1.2: it lists nothing and
	// asks nothing.
	OnWanted func(from peer.ID, agentIDs []string)
	// DisableSyncTrail makes the node behave as one of an earlier version
	// toward trailing shard syncs: it does not list TrailSyncProtocol and
	// syncs a shard it joins only with its first peers. For tests and
	// measurements of mixed versions; off by default.
	DisableSyncTrail bool
	// MaxShards bounds the shard topics this node joins (default 1024).
	MaxShards int
	// SubscriptionBuffer is the delivery buffer of each subscription
	// (default 256); pubsub drops messages for a subscriber that falls
	// that far behind.
	SubscriptionBuffer int

	// Tracers are extra pubsub raw tracers (traffic accounting in simnet
	// and the scaling measurements); they must not block.
	Tracers []pubsub.RawTracer

	defaultScore bool // Score was nil: New may extend the whitelist
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxMessageBytes:      record.MaxMessageBytes,
		PeerExchange:         true,
		FloodPublish:         true,
		ScoreInspectPeriod:   5 * time.Second,
		SyncPeers:            3,
		SyncLimit:            1000,
		SyncTimeout:          10 * time.Second,
		SyncServeInterval:    5 * time.Second,
		SyncServeBurst:       3,
		SyncServeConcurrency: 8,
		UnknownAgentBackoff:  4 * time.Second,
		UnknownAgentWorkers:  4,
		PullTimeout:          3 * time.Second,
		PullServeInterval:    500 * time.Millisecond,
		PullServeBurst:       10,
		PullServeConcurrency: 16,
		MaxScenes:            64,
		MaxShards:            1024,
		SubscriptionBuffer:   256,
	}
}

// withDefaults fills zero fields and validates the rest. It returns
// copies of Params, Score (including its Topics map) and Thresholds, so
// one Config can configure many instances and nothing is shared.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MaxMessageBytes < 1024 || c.MaxMessageBytes > 1<<20 {
		return c, fmt.Errorf("gossip: MaxMessageBytes %d must be between 1 KiB and 1 MiB", c.MaxMessageBytes)
	}
	if c.ScoreInspectPeriod == 0 {
		c.ScoreInspectPeriod = d.ScoreInspectPeriod
	}
	if c.SyncPeers == 0 {
		c.SyncPeers = d.SyncPeers
	}
	if c.SyncLimit == 0 {
		c.SyncLimit = d.SyncLimit
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = d.SyncTimeout
	}
	if c.SyncServeInterval == 0 {
		c.SyncServeInterval = d.SyncServeInterval
	}
	if c.SyncServeBurst == 0 {
		c.SyncServeBurst = d.SyncServeBurst
	}
	if c.SyncServeConcurrency == 0 {
		c.SyncServeConcurrency = d.SyncServeConcurrency
	}
	if c.UnknownAgentBackoff == 0 {
		c.UnknownAgentBackoff = d.UnknownAgentBackoff
	}
	if c.UnknownAgentWorkers == 0 {
		c.UnknownAgentWorkers = d.UnknownAgentWorkers
	}
	if c.PullTimeout == 0 {
		c.PullTimeout = d.PullTimeout
	}
	if c.PullServeInterval == 0 {
		c.PullServeInterval = d.PullServeInterval
	}
	if c.PullServeBurst == 0 {
		c.PullServeBurst = d.PullServeBurst
	}
	if c.PullServeConcurrency == 0 {
		c.PullServeConcurrency = d.PullServeConcurrency
	}
	if c.MaxScenes == 0 {
		c.MaxScenes = d.MaxScenes
	}
	if c.MaxShards == 0 {
		c.MaxShards = d.MaxShards
	}
	if c.SubscriptionBuffer == 0 {
		c.SubscriptionBuffer = d.SubscriptionBuffer
	}
	switch {
	case c.ScoreInspectPeriod < 0:
		return c, fmt.Errorf("gossip: ScoreInspectPeriod must be positive")
	case c.SyncPeers < 0 || c.SyncPeers > 32:
		return c, fmt.Errorf("gossip: SyncPeers %d must be between 1 and 32", c.SyncPeers)
	case c.SyncLimit < 0 || c.SyncLimit > maxSyncLimit:
		return c, fmt.Errorf("gossip: SyncLimit %d must be between 1 and %d", c.SyncLimit, maxSyncLimit)
	case c.SyncTimeout < 0:
		return c, fmt.Errorf("gossip: SyncTimeout must be positive")
	case c.SyncServeInterval < 0 || c.SyncServeBurst < 0 || c.SyncServeConcurrency < 0:
		return c, fmt.Errorf("gossip: SyncServeInterval, SyncServeBurst and SyncServeConcurrency must be positive")
	case c.PullTimeout < 0 || c.PullServeInterval < 0 || c.PullServeBurst < 0 || c.PullServeConcurrency < 0:
		return c, fmt.Errorf("gossip: PullTimeout, PullServeInterval, PullServeBurst and PullServeConcurrency must be positive")
	case c.UnknownAgentBackoff < 0:
		return c, fmt.Errorf("gossip: UnknownAgentBackoff must be positive")
	case c.UnknownAgentWorkers < 0 || c.UnknownAgentWorkers > 64:
		return c, fmt.Errorf("gossip: UnknownAgentWorkers %d must be between 1 and 64", c.UnknownAgentWorkers)
	case c.MaxScenes < 0 || c.SubscriptionBuffer < 0:
		return c, fmt.Errorf("gossip: MaxScenes and SubscriptionBuffer must be positive")
	case c.MaxShards < 0 || c.MaxShards > maxSyncShards:
		return c, fmt.Errorf("gossip: MaxShards %d must be between 1 and %d", c.MaxShards, maxSyncShards)
	}

	if c.Params == nil {
		p := pubsub.DefaultGossipSubParams()
		c.Params = &p
	} else {
		p := *c.Params
		c.Params = &p
	}
	if c.Thresholds == nil {
		c.Thresholds = DefaultThresholds()
	} else {
		t := *c.Thresholds
		c.Thresholds = &t
	}
	if c.Score == nil {
		c.Score = DefaultScoreParams()
		c.defaultScore = true
	} else {
		s := *c.Score
		s.Topics = make(map[string]*pubsub.TopicScoreParams, len(c.Score.Topics)+1)
		for k, v := range c.Score.Topics {
			tp := *v
			s.Topics[k] = &tp
		}
		if s.AppSpecificScore == nil {
			s.AppSpecificScore = zeroAppScore
		}
		c.Score = &s
	}
	if c.Score.Topics == nil {
		c.Score.Topics = map[string]*pubsub.TopicScoreParams{}
	}
	if _, ok := c.Score.Topics[AnnounceTopic]; !ok {
		c.Score.Topics[AnnounceTopic] = AnnounceTopicScoreParams()
	}
	if c.SceneTopicScore == nil {
		c.SceneTopicScore = AnnounceTopicScoreParams()
	} else {
		tp := *c.SceneTopicScore
		c.SceneTopicScore = &tp
	}
	if err := validateRouter(c.Params); err != nil {
		return c, err
	}
	if err := validateThresholds(c.Thresholds); err != nil {
		return c, err
	}
	if err := validateScore(c.Score); err != nil {
		return c, err
	}
	if err := validateTopicScore(c.SceneTopicScore); err != nil {
		return c, fmt.Errorf("gossip: SceneTopicScore.%w", err)
	}
	return c, nil
}

// maxSyncLimit bounds SyncLimit and the limit of a sync request, so a sync
// answer stays below maxSyncLimit × (MaxAgentBytes + 1 KiB) ≈ 330 MiB in
// the worst case and far less in practice.
const maxSyncLimit = 10000

func zeroAppScore(peer.ID) float64 { return 0 }

// Scoring defaults. Every value is documented in docs/protocol.md
// ("Peer scoring"); the reasoning is summarised here.
const (
	// Thresholds in the style of lotus (Filecoin), which runs GossipSub
	// v1.1 scoring in production: gossip is no longer exchanged with a
	// peer below −500, our own messages are no longer sent to it below
	// −1000, and below −2500 everything it sends is ignored.
	scoreGossipThreshold   = -500
	scorePublishThreshold  = -1000
	scoreGraylistThreshold = -2500
	// PX is accepted from any peer whose score is not negative. lotus uses
	// 1000 together with a large app-specific score for its own
	// bootstrappers; agentd gives no app-specific score, so a positive
	// threshold would refuse all PX, and a node that only dialled a
	// bootstrap node would learn its mesh through heartbeat gossip only
	// (seconds instead of milliseconds, see the star-topology test). A
	// peer that misbehaved at all (P4, P7) scores below 0 and is ignored.
	scoreAcceptPXThreshold = 0
	// Opportunistic grafting when the mesh median falls below 1: time in
	// mesh alone reaches 1 after about six minutes.
	scoreOpportunisticGraftThreshold = 1

	// P4 per invalid message, squared: 1 → −100, 4 → −1600 (below the
	// publish threshold), 6 → −3600 (graylisted, even with the largest
	// positive score, TopicScoreCap 50). Decays to zero in an hour.
	scoreInvalidWeight = -100
	scoreInvalidDecay  = time.Hour
	scoreTopicCap      = 50

	// P6: more than 32 peers behind one public IPv4 address or IPv6 /64
	// cost 25 × (n − 32)² each: 40 → −1600, 43 → graylisted. Private
	// prefixes and this host's own public /32 and /64 are exempt: many
	// agents behind one LAN address, or in one LAN's /64, are normal for
	// agentd; a remote sybil farm in one subnet is not.
	scoreIPColocationWeight    = -25
	scoreIPColocationThreshold = 32

	// P7: broken IHAVE promises and GRAFTs during backoff, above 6.
	scoreBehaviourWeight    = -10
	scoreBehaviourThreshold = 6
	scoreBehaviourDecay     = time.Hour

	scoreRetain = 6 * time.Hour
)

// ownNets returns the public subnets of addrs as pubsub groups them for
// P6: the /32 of an IPv4 address, the /64 of an IPv6 address. Loopback and
// private addresses are skipped (pubsub skips loopback, privateNets covers
// the rest).
func ownNets(addrs []ma.Multiaddr) []*net.IPNet {
	var out []*net.IPNet
	seen := map[string]bool{}
	for _, a := range addrs {
		ip, err := manet.ToIP(a)
		if err != nil || ip.IsLoopback() || ip.IsUnspecified() || isPrivate(ip) {
			continue
		}
		var n *net.IPNet
		if ip4 := ip.To4(); ip4 != nil {
			n = &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}
		} else {
			n = &net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}
		}
		if !seen[n.String()] {
			seen[n.String()] = true
			out = append(out, n)
		}
	}
	return out
}

func isPrivate(ip net.IP) bool {
	for _, s := range privateNets {
		_, n, _ := net.ParseCIDR(s)
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// privateNets are exempt from the IP-colocation penalty: RFC 1918, CGNAT
// (RFC 6598), link-local and unique-local addresses. Loopback is skipped by
// pubsub itself.
var privateNets = []string{
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
	"169.254.0.0/16", "fc00::/7", "fe80::/10",
}

// DefaultThresholds returns agentd's score thresholds (see the constants
// above and docs/protocol.md).
func DefaultThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:             scoreGossipThreshold,
		PublishThreshold:            scorePublishThreshold,
		GraylistThreshold:           scoreGraylistThreshold,
		AcceptPXThreshold:           scoreAcceptPXThreshold,
		OpportunisticGraftThreshold: scoreOpportunisticGraftThreshold,
	}
}

// DefaultScoreParams returns agentd's peer-score parameters with the
// announce topic's parameters in Topics. New adds the host's own public
// subnets to the IP-colocation whitelist when it uses these defaults.
func DefaultScoreParams() *pubsub.PeerScoreParams {
	var wl []*net.IPNet
	for _, s := range privateNets {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			panic("gossip: bad private prefix " + s) // constant table
		}
		wl = append(wl, n)
	}
	return &pubsub.PeerScoreParams{
		Topics:                      map[string]*pubsub.TopicScoreParams{AnnounceTopic: AnnounceTopicScoreParams()},
		TopicScoreCap:               scoreTopicCap,
		AppSpecificScore:            zeroAppScore,
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    scoreIPColocationWeight,
		IPColocationFactorThreshold: scoreIPColocationThreshold,
		IPColocationFactorWhitelist: wl,
		BehaviourPenaltyWeight:      scoreBehaviourWeight,
		BehaviourPenaltyThreshold:   scoreBehaviourThreshold,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(scoreBehaviourDecay),
		DecayInterval:               pubsub.DefaultDecayInterval,
		DecayToZero:                 pubsub.DefaultDecayToZero,
		RetainScore:                 scoreRetain,
	}
}

// AnnounceTopicScoreParams returns the score parameters of the announce
// topic (and, by default, of scene topics). The topic is low-rate (one
// heartbeat per agent every few seconds, announcements on change), so the
// mesh-delivery penalties P3 and P3b are off: they punish mesh peers that
// forward fewer messages than a threshold, which honest peers do whenever
// traffic is sparse.
func AnnounceTopicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		TopicWeight: 1,
		// P1: +1 per 6 minutes in the mesh, at most ~10 after an hour.
		TimeInMeshWeight:  0.0027,
		TimeInMeshQuantum: time.Second,
		TimeInMeshCap:     3600,
		// P2: +1 per first delivery, decaying over 10 minutes, capped at 100.
		FirstMessageDeliveriesWeight: 1,
		FirstMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:    100,
		// P3, P3b: off (weights 0), see above.
		MeshMessageDeliveriesWeight: 0,
		MeshFailurePenaltyWeight:    0,
		// P4: invalid messages.
		InvalidMessageDeliveriesWeight: scoreInvalidWeight,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(scoreInvalidDecay),
	}
}
