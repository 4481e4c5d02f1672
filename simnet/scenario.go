package simnet

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
)

// Kind names a scenario.
type Kind string

// The scenarios.
const (
	// KindChurn: every ChurnInterval, ChurnFraction of the nodes leave
	// (half gracefully, half by crash) and as many join (half restart a
	// departed node with its identity and store, half are fresh).
	KindChurn Kind = "churn"
	// KindPartition: at a quarter of the run the network splits in two
	// halves for PartitionFor, then heals.
	KindPartition Kind = "partition"
	// KindMassJoin: at a quarter of the run MassJoin fresh nodes join at
	// once.
	KindMassJoin Kind = "massjoin"
	// KindSteady: no churn; queries only.
	KindSteady Kind = "steady"
	// KindSybil: no churn; at SybilAt a hostile peer joins and publishes
	// SybilAgents records of agents it mints (each with its own agent key,
	// all signed by its peer key) at SybilRate per second, each followed
	// by a heartbeat claiming a one-day interval, then crashes.
	KindSybil Kind = "sybil"
)

// Kinds lists the scenarios.
var Kinds = []Kind{KindChurn, KindPartition, KindMassJoin, KindSteady, KindSybil}

// ErrConfig is wrapped by every configuration error; the message names the
// field.
var ErrConfig = errors.New("simnet: invalid scenario")

// ParseKind returns the scenario named s.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("%w: scenario %q is not one of churn, partition, massjoin, steady, sybil", ErrConfig, s)
}

// Scenario describes one simulation run. The zero value of a field takes
// the default documented on it; Run validates the result.
type Scenario struct {
	// Kind is the scenario (default churn).
	Kind Kind
	// Nodes is the number of agent nodes at the start (default 100).
	Nodes int
	// BootstrapNodes is the number of bootstrap nodes every node joins
	// through (default 3). They host no agent, never churn, and are not
	// counted in Nodes.
	BootstrapNodes int
	// Duration is the measured part of the run, after the warm-up
	// (default 2 min).
	Duration time.Duration
	// Seed makes the run repeatable (0 is a valid seed).
	Seed uint64

	// Latency is the one-way latency of every link (default 20 ms; set
	// NoLatency for 0). Jitter spreads each link's latency uniformly over
	// [Latency-Jitter, Latency+Jitter], drawn per link from the seed
	// (default the smaller of 5 ms and Latency; negative means none). Bandwidth caps each link in
	// bytes per second, both directions together (0 = unlimited).
	Latency   time.Duration
	NoLatency bool
	Jitter    time.Duration
	Bandwidth float64
	// ConnLow and ConnHigh are every node's connection manager watermarks
	// and ConnGrace its grace period (default agentd's production ones,
	// package p2p).
	ConnLow, ConnHigh int
	ConnGrace         time.Duration
	// Loss is the share of packets lost on every link (0 ≤ Loss < 0.5).
	// Streams are reliable, as TCP and QUIC are: a lost packet costs a
	// retransmission timeout (200 ms, doubling while the retransmission
	// is lost too) and delays what follows it on the stream; nothing is
	// dropped. A write of n bytes is ⌈n/1400⌉ packets.
	Loss float64

	// ChurnInterval and ChurnFraction drive KindChurn (default 10 s and
	// 0.1). CrashShare of the leavers crash, the rest leave gracefully
	// (default 0.5; negative means none crash). RestartShare of the
	// joiners restart a departed node with the same identity and store
	// when one is available, the rest are fresh (default 0.5; negative
	// means none restart).
	ChurnInterval time.Duration
	ChurnFraction float64
	CrashShare    float64
	RestartShare  float64
	// PartitionAt and PartitionFor drive KindPartition (default a quarter
	// of Duration, and 30 s).
	PartitionAt  time.Duration
	PartitionFor time.Duration
	// MassJoin and MassJoinAt drive KindMassJoin (default 50 nodes at a
	// quarter of Duration).
	MassJoin   int
	MassJoinAt time.Duration
	// SybilAgents, SybilRate and SybilAt drive KindSybil (default 10 000
	// agents at 500 per second from a quarter of Duration).
	SybilAgents int
	SybilRate   float64
	SybilAt     time.Duration
	// SybilFreshPeers makes the hostile peer sign every fake with a peer
	// key of its own (and author its gossip messages with it), so no
	// defence keyed on the record's peer_id alone can bound it; it runs a
	// bare GossipSub router instead of an agentd node.
	SybilFreshPeers bool

	// QueryRate is the number of discover queries per second over the
	// whole network (default 20), Poisson arrivals; each is issued by a
	// uniformly chosen live node. Half ask by capability, half by skill and
	// capability. QueryConcurrency bounds the queries in flight (default
	// 256); a query beyond it is skipped and counted.
	QueryRate        float64
	QueryConcurrency int
	// QueryInterest, when > 0, keeps each node's queries to its own
	// interest: k capabilities drawn per node (Zipf) when it is created;
	// a query then asks the chosen node for one of them, by capability.
	// With a catalog that grows with the network (Capabilities ∝ Nodes),
	// every node has the same interest at every size (make simnet-curve).
	QueryInterest int

	// Skills and Capabilities size the catalog (default 40 and 60). Each
	// skill offers 1–3 capabilities; each node registers 1–3 skills. Skills,
	// capabilities and queries are drawn with Zipf popularity of exponent
	// Zipf (default 1.2; must be > 1), or uniformly when Uniform is set:
	// then every capability is offered by about as many agents, and a
	// catalog that grows with the network keeps the agents per capability,
	// so each node's interest holds as many agents at every size.
	Skills       int
	Capabilities int
	Zipf         float64
	Uniform      bool

	// Node configures every agent node; its zero value is the production
	// defaults (heartbeat 5 s, timeout 30 s, …). LAN discovery is always
	// off. Bootstrap is replaced by the bootstrap nodes.
	Node node.Config
	// StaleAfter is how long a provider must have been dead for a result
	// naming it to count as stale (default Node.Timeout, or 30 s).
	StaleAfter time.Duration

	// WarmupTimeout bounds the warm-up's wait: once every node has
	// started and registered, the harness waits until every node sees
	// every agent, at most this long (default 60 s). StartConcurrency
	// bounds nodes starting at once during the warm-up (default Nodes/16,
	// at least 16).
	WarmupTimeout    time.Duration
	StartConcurrency int
	// SampleInterval is the width of one time-series bucket and the period
	// of resource sampling (default 5 s). PollInterval is how often the
	// harness checks the nodes' views for disappearance and visibility
	// (default 100 ms; it is the resolution of those figures).
	SampleInterval time.Duration
	PollInterval   time.Duration

	// Logger receives the harness's own log (default discard). NodeLogger
	// receives the nodes' logs (default discard).
	Logger     *slog.Logger
	NodeLogger *slog.Logger
	// AtEnd, when set, is called once the measured run is over and before
	// anything is torn down (every node is still running): a heap profile
	// taken there shows what the nodes hold.
	AtEnd func()
	// Progress, when set, is called about once a second of scenario time
	// (and once at the end) from a harness goroutine; it must not block.
	Progress func(Progress)
}

// Progress is a snapshot of a running scenario.
type Progress struct {
	Phase    string        // "warmup", "run", "done"
	Elapsed  time.Duration // since the scenario started (0 during warm-up)
	Duration time.Duration
	Live     int // live agent nodes
	Nodes    int // agent nodes the warm-up starts
	Queries  int // queries scored so far
	Recall   float64
	Stale    float64
}

// withDefaults returns s with defaults filled, or an error naming the
// first invalid field.
func (s Scenario) withDefaults() (Scenario, error) {
	if s.Kind == "" {
		s.Kind = KindChurn
	}
	if _, err := ParseKind(string(s.Kind)); err != nil {
		return s, err
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if s.ConnLow == 0 && s.ConnHigh == 0 {
		s.ConnLow, s.ConnHigh = p2p.DefaultLowWater, p2p.DefaultHighWater
	}
	def(&s.ConnGrace, p2p.DefaultConnGrace)
	if s.Nodes == 0 {
		s.Nodes = 100
	}
	if s.BootstrapNodes == 0 {
		s.BootstrapNodes = 3
	}
	def(&s.Duration, 2*time.Minute)
	if s.NoLatency {
		s.Latency = 0
	} else {
		def(&s.Latency, 20*time.Millisecond)
	}
	def(&s.Jitter, min(5*time.Millisecond, s.Latency))
	if s.Jitter < 0 {
		s.Jitter = 0
	}
	def(&s.ChurnInterval, 10*time.Second)
	if s.ChurnFraction == 0 {
		s.ChurnFraction = 0.1
	}
	if s.CrashShare == 0 {
		s.CrashShare = 0.5
	} else if s.CrashShare < 0 {
		s.CrashShare = 0
	}
	if s.RestartShare == 0 {
		s.RestartShare = 0.5
	} else if s.RestartShare < 0 {
		s.RestartShare = 0
	}
	def(&s.PartitionAt, s.Duration/4)
	def(&s.PartitionFor, 30*time.Second)
	if s.MassJoin == 0 {
		s.MassJoin = 50
	}
	def(&s.MassJoinAt, s.Duration/4)
	if s.SybilAgents == 0 {
		s.SybilAgents = 10000
	}
	if s.SybilRate == 0 {
		s.SybilRate = 500
	}
	def(&s.SybilAt, s.Duration/4)
	if s.QueryRate == 0 {
		s.QueryRate = 20
	}
	if s.QueryConcurrency == 0 {
		s.QueryConcurrency = 256
	}
	if s.Kind == KindSybil && s.Node.Scope == "" {
		// The flood tests admission into views that hold everything, the
		// worst case: the hostile peer publishes on the announce topic,
		// which scoped nodes do not hear at all.
		s.Node.Scope = node.ScopeFull
	}
	if s.Skills == 0 {
		s.Skills = 40
	}
	if s.Capabilities == 0 {
		s.Capabilities = 60
	}
	if s.Uniform {
		s.Zipf = 0 // newZipf draws uniformly
	} else if s.Zipf == 0 {
		s.Zipf = 1.2
	}
	if s.StaleAfter == 0 {
		_, s.StaleAfter = s.heartbeat()
	}
	def(&s.WarmupTimeout, 60*time.Second)
	if s.StartConcurrency == 0 {
		// While nodes start, the ones up already run (heartbeats,
		// lookups); 1 000 nodes 16 at a time took 157 simulated seconds,
		// most of the run's wall time.
		s.StartConcurrency = max(16, s.Nodes/16)
	}
	def(&s.SampleInterval, 5*time.Second)
	def(&s.PollInterval, 100*time.Millisecond)
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.NodeLogger == nil {
		s.NodeLogger = slog.New(slog.DiscardHandler)
	}
	return s, s.validate()
}

// Bounds that keep a run inside what one process can hold.
const (
	MaxNodes          = 5000
	MaxBootstrapNodes = 16
	MaxDuration       = 24 * time.Hour
	MaxQueryRate      = 10000
	MaxCatalog        = 100000
)

func (s *Scenario) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	hb, timeout := s.heartbeat()
	switch {
	case s.Nodes < 2 || s.Nodes > MaxNodes:
		return bad("nodes", "is %d; must be between 2 and %d", s.Nodes, MaxNodes)
	case s.BootstrapNodes < 1 || s.BootstrapNodes > MaxBootstrapNodes:
		return bad("bootstrap nodes", "is %d; must be between 1 and %d", s.BootstrapNodes, MaxBootstrapNodes)
	case s.Duration < time.Second || s.Duration > MaxDuration:
		return bad("duration", "is %s; must be between 1s and %s", s.Duration, MaxDuration)
	case s.Latency < 0 || s.Latency > 10*time.Second:
		return bad("latency", "is %s; must be between 0 and 10s", s.Latency)
	case s.Jitter > s.Latency:
		return bad("jitter", "is %s; must not exceed the latency %s", s.Jitter, s.Latency)
	case !finite(s.Loss) || s.Loss < 0 || s.Loss >= 0.5:
		return bad("loss", "is %v; must be at least 0 and below 0.5", s.Loss)
	case !finite(s.Bandwidth) || s.Bandwidth < 0:
		return bad("bandwidth", "is %v; must be 0 (unlimited) or a positive number of bytes per second", s.Bandwidth)
	case s.Bandwidth > 0 && s.Bandwidth < 1024:
		return bad("bandwidth", "is %v bytes/s; below 1 KiB/s nothing useful gets through", s.Bandwidth)
	case s.ConnLow < 1 || s.ConnHigh <= s.ConnLow || s.ConnHigh > 10_000:
		return bad("connection watermarks", "are %d/%d; the low one must be at least 1 and below the high one (at most 10000)", s.ConnLow, s.ConnHigh)
	case s.ConnGrace < time.Second || s.ConnGrace > time.Hour:
		return bad("connection grace period", "is %s; must be between 1s and 1h", s.ConnGrace)
	case s.ChurnInterval < 100*time.Millisecond:
		return bad("churn interval", "is %s; must be at least 100ms", s.ChurnInterval)
	case !finite(s.ChurnFraction) || s.ChurnFraction < 0 || s.ChurnFraction > 0.9:
		return bad("churn fraction", "is %v; must be between 0 and 0.9", s.ChurnFraction)
	case !finite(s.CrashShare) || s.CrashShare > 1:
		return bad("crash share", "is %v; must be between 0 and 1", s.CrashShare)
	case !finite(s.RestartShare) || s.RestartShare > 1:
		return bad("restart share", "is %v; must be between 0 and 1", s.RestartShare)
	case s.PartitionAt < 0 || s.PartitionAt >= s.Duration:
		return bad("partition at", "is %s; must be inside the duration %s", s.PartitionAt, s.Duration)
	case s.PartitionFor <= 0:
		return bad("partition for", "is %s; must be positive", s.PartitionFor)
	case s.MassJoin < 1 || s.MassJoin > MaxNodes:
		return bad("mass join", "is %d; must be between 1 and %d", s.MassJoin, MaxNodes)
	case s.SybilAgents < 1 || s.SybilAgents > 1_000_000:
		return bad("sybil agents", "is %d; must be between 1 and 1000000", s.SybilAgents)
	case !finite(s.SybilRate) || s.SybilRate < 1 || s.SybilRate > 100_000:
		return bad("sybil rate", "is %v; must be between 1 and 100000 per second", s.SybilRate)
	case s.SybilAt < 0 || s.SybilAt >= s.Duration:
		return bad("sybil at", "is %s; must be inside the duration %s", s.SybilAt, s.Duration)
	case s.MassJoinAt < 0 || s.MassJoinAt >= s.Duration:
		return bad("mass join at", "is %s; must be inside the duration %s", s.MassJoinAt, s.Duration)
	case s.QueryInterest < 0 || s.QueryInterest > MaxCatalog:
		return bad("query interest", "is %d; must be between 0 and %d", s.QueryInterest, MaxCatalog)
	case !finite(s.QueryRate) || s.QueryRate < 0 || s.QueryRate > MaxQueryRate:
		return bad("query rate", "is %v; must be between 0 and %d per second", s.QueryRate, MaxQueryRate)
	case s.QueryConcurrency < 1:
		return bad("query concurrency", "is %d; must be at least 1", s.QueryConcurrency)
	case hb < config.MinInterval || hb > config.MaxInterval:
		return bad("heartbeat interval", "is %s; must be between %s and %s", hb, config.MinInterval, config.MaxInterval)
	case timeout < hb || timeout > config.MaxInterval:
		return bad("liveness timeout", "is %s; must be at least the heartbeat interval %s and at most %s", timeout, hb, config.MaxInterval)
	case s.Skills < 1 || s.Skills > MaxCatalog:
		return bad("skills", "is %d; must be between 1 and %d", s.Skills, MaxCatalog)
	case s.Capabilities < 1 || s.Capabilities > MaxCatalog:
		return bad("capabilities", "is %d; must be between 1 and %d", s.Capabilities, MaxCatalog)
	case !s.Uniform && (!finite(s.Zipf) || s.Zipf <= 1 || s.Zipf > 10):
		return bad("zipf", "is %v; must be above 1 and at most 10", s.Zipf)
	case s.StaleAfter < 0:
		return bad("stale after", "is %s; must not be negative", s.StaleAfter)
	case s.WarmupTimeout < 0:
		return bad("warmup timeout", "is %s; must not be negative", s.WarmupTimeout)
	case s.StartConcurrency < 1:
		return bad("start concurrency", "is %d; must be at least 1", s.StartConcurrency)
	case s.SampleInterval < 100*time.Millisecond:
		return bad("sample interval", "is %s; must be at least 100ms", s.SampleInterval)
	case s.PollInterval < time.Millisecond || s.PollInterval > s.SampleInterval:
		return bad("poll interval", "is %s; must be between 1ms and the sample interval", s.PollInterval)
	}
	if s.Kind == KindMassJoin && s.Nodes+s.MassJoin > MaxNodes {
		return bad("mass join", "brings the network to %d nodes, more than %d", s.Nodes+s.MassJoin, MaxNodes)
	}
	return nil
}

// heartbeat returns every node's heartbeat interval and liveness timeout:
// Node's, or the node's defaults where Node leaves them zero.
func (s *Scenario) heartbeat() (interval, timeout time.Duration) {
	interval, timeout = s.Node.HeartbeatInterval, s.Node.Timeout
	if interval <= 0 {
		interval = config.DefaultHeartbeatInterval
	}
	if timeout <= 0 {
		timeout = config.DefaultLivenessTimeout
	}
	return interval, timeout
}
