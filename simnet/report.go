package simnet

import (
	"encoding/json"
	"fmt"
	"github.com/agentd/agentd/node"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run achieved and what it cost. It marshals to the JSON
// that `agentd simnet --json` writes; durations are in the unit their name
// says.
type Report struct {
	// Command is the command line that produced the report, and Clock the
	// clock it ran on: "virtual" or "real" (both set by the CLI).
	Command string `json:"command,omitempty"`
	Clock   string `json:"clock,omitempty"`
	// WallSeconds is the run's wall time, warm-up included (set by the
	// CLI).
	WallSeconds float64      `json:"wall_s,omitempty"`
	Scenario    ScenarioInfo `json:"scenario"`
	// Interrupted is set when the run was cancelled before its end.
	Interrupted bool        `json:"interrupted,omitempty"`
	Setup       SetupInfo   `json:"setup"`
	Queries     QueryStats  `json:"queries"`
	Latency     LatencyInfo `json:"lookup_latency"`
	Gossip      GossipStats `json:"gossip"`
	Churn       ChurnStats  `json:"churn"`
	Traffic     TrafficInfo `json:"traffic"`
	Resources   Resources   `json:"resources"`
	Timeline    []Bucket    `json:"timeline"`
	// Sybil is what KindSybil's hostile peer achieved.
	Sybil *SybilStats `json:"sybil,omitempty"`
	Marks []Mark      `json:"events"`
	// NodeErrors lists node operations that failed (a node that could not
	// start or restart); Check fails the run when there is any.
	NodeErrors []string `json:"node_errors,omitempty"`
	// Thresholds and Failures are filled by Check.
	Thresholds *Thresholds `json:"thresholds,omitempty"`
	Failures   []string    `json:"failures,omitempty"`
}

// ScenarioInfo is the effective configuration of a run.
type ScenarioInfo struct {
	Kind           Kind    `json:"kind"`
	Nodes          int     `json:"nodes"`
	BootstrapNodes int     `json:"bootstrap_nodes"`
	DurationS      float64 `json:"duration_s"`
	Seed           uint64  `json:"seed"`
	LatencyMS      float64 `json:"latency_ms"`
	JitterMS       float64 `json:"jitter_ms"`
	BandwidthBps   float64 `json:"bandwidth_bytes_per_s"`
	ConnLow        int     `json:"conn_low_water,omitempty"`
	ConnHigh       int     `json:"conn_high_water,omitempty"`
	ConnGraceS     float64 `json:"conn_grace_s,omitempty"`
	// MeshDegree and FloodPublish are every node's GossipSub mesh degree
	// D and flood publishing (agentd's defaults unless the scenario's
	// gossip configuration sets them; the sybil scenario's hostile peer
	// keeps the defaults).
	MeshDegree        int     `json:"mesh_degree,omitempty"`
	FloodPublish      bool    `json:"flood_publish"`
	Loss              float64 `json:"loss,omitempty"`
	Scope             string  `json:"scope"`
	ChurnIntervalS    float64 `json:"churn_interval_s,omitempty"`
	ChurnFraction     float64 `json:"churn_fraction,omitempty"`
	PartitionAtS      float64 `json:"partition_at_s,omitempty"`
	PartitionForS     float64 `json:"partition_for_s,omitempty"`
	MassJoin          int     `json:"mass_join,omitempty"`
	MassJoinAtS       float64 `json:"mass_join_at_s,omitempty"`
	SybilAgents       int     `json:"sybil_agents,omitempty"`
	SybilRate         float64 `json:"sybil_rate_per_s,omitempty"`
	SybilAtS          float64 `json:"sybil_at_s,omitempty"`
	QueryRate         float64 `json:"query_rate_per_s"`
	QueryInterest     int     `json:"query_interest,omitempty"`
	Skills            int     `json:"catalog_skills"`
	Capabilities      int     `json:"catalog_capabilities"`
	Zipf              float64 `json:"zipf"`
	HeartbeatInterval float64 `json:"heartbeat_interval_s"`
	// GossipBeatEvery: one heartbeat in so many goes on gossip where every
	// peer serves heartbeat pulls (node.Config.GossipBeatEvery).
	GossipBeatEvery int `json:"gossip_beat_every,omitempty"`
	// BeatRequests: heartbeats on request (protocol v1.3), off where
	// every node ran as v1.2 (node.Config.DisableBeatRequests).
	BeatRequests bool `json:"beat_requests"`
	// TrailingSyncs: trailing shard syncs (sync 1.2.0), off where every
	// node ran as an earlier version (node.Config.DisableSyncTrail).
	TrailingSyncs    bool    `json:"trailing_syncs"`
	LivenessTimeoutS float64 `json:"liveness_timeout_s"`
	StaleAfterS      float64 `json:"stale_after_s"`
	GoVersion        string  `json:"go_version"`
	CPUs             int     `json:"cpus"`
}

// SetupInfo describes the warm-up.
type SetupInfo struct {
	// StartS is the time from the first node start to the last
	// registration; ConvergedS the time until every node saw every agent
	// (Converged false: the warm-up timeout passed first).
	StartS     float64 `json:"start_s"`
	Converged  bool    `json:"converged"`
	ConvergedS float64 `json:"converged_s"`
}

// QueryStats scores the lookups. See Outcome for the counts.
type QueryStats struct {
	Scheduled int `json:"scheduled"`
	// Issued queries ran; Skipped found QueryConcurrency queries in
	// flight; Aborted lost their querier (it left) before answering and
	// are not scored.
	Issued  int `json:"issued"`
	Skipped int `json:"skipped"`
	Aborted int `json:"aborted"`
	// Scored had at least one live reachable provider (they make recall);
	// NoProvider had none (they still count for the stale rate).
	Scored     int `json:"scored"`
	NoProvider int `json:"no_provider"`
	// Errors counts failed lookups by code (DISC_001 timeout, DISC_002 no
	// skills found, DISC_005 network, other).
	Errors map[string]int `json:"errors,omitempty"`
	Outcome
	// Recall is Found ÷ Expected over all queries; RecallAllLive ignores
	// reachability; RecallMean is the mean of per-query recall over scored
	// queries; FullRecall the share of scored queries that found every
	// provider.
	Recall        float64 `json:"recall"`
	RecallAllLive float64 `json:"recall_all_live"`
	RecallMean    float64 `json:"recall_mean"`
	FullRecall    float64 `json:"full_recall_share"`
	// StaleRate is Stale ÷ Returned; StaleUnflaggedRate counts only stale
	// results the resolver did not mark stale.
	StaleRate          float64 `json:"stale_rate"`
	StaleUnflaggedRate float64 `json:"stale_unflagged_rate"`
	// StaleDeadFor is how long the agents of stale results had been dead;
	// StaleBySource counts stale results by the source the resolver gave.
	StaleDeadFor  Percentiles    `json:"stale_dead_for"`
	StaleBySource map[string]int `json:"stale_by_source,omitempty"`
	// StaleAtLaterJoiner counts stale results returned by a querier that
	// started after the agent had died: it can only have learnt the dead
	// agent from another node (sync, DHT), not from the agent.
	StaleAtLaterJoiner int `json:"stale_at_later_joiner"`
}

// LatencyInfo is the lookup latency, over all queries and by the source
// of the first result (as the node's agentd_lookup_duration_seconds labels
// it: gossip, local, dht, cache; "none" for failed lookups).
type LatencyInfo struct {
	All      Percentiles            `json:"all"`
	BySource map[string]Percentiles `json:"by_source"`
}

// GossipStats is the publish-to-delivery latency of gossip messages.
type GossipStats struct {
	// SampledOneIn: propagation is measured on the messages whose id
	// hashes to 0 modulo this (at every node), to bound the probe's cost.
	SampledOneIn int                    `json:"sampled_one_in"`
	Propagation  Percentiles            `json:"propagation"`
	ByKind       map[string]Percentiles `json:"propagation_by_kind"`
	// ProbeDropped deliveries were not measured (the collector lagged);
	// RPCDrops and Undeliverable are pubsub's own overload signals.
	ProbeDropped  int64 `json:"probe_dropped"`
	RPCDrops      int64 `json:"rpc_drops"`
	Undeliverable int64 `json:"undeliverable"`
	// CatchUp deliveries (not in Propagation) were of messages signed
	// before the delivering node had its first mesh peer in the announce
	// topic: history a joiner fetched through IHAVE/IWANT.
	CatchUp int64 `json:"catch_up_at_joiners"`
	// ResendsUnmeasured deliveries (not in Propagation) were of resent
	// announcements whose publication the probe did not see.
	ResendsUnmeasured int64 `json:"resends_unmeasured,omitempty"`
	// Interest is what the nodes listened to at the end of the run.
	Interest InterestStats `json:"interest"`
	// PubsubIn is what the nodes' GossipSub received in the measured
	// window, by kind, per node per second (bootstrap nodes, which run no
	// GossipSub, not counted).
	PubsubIn *PubsubMix `json:"pubsub_in,omitempty"`
}

// PubsubMix is what GossipSub received, per node per second: RPC frames;
// the message copies in them — First delivered (validated, new),
// Duplicates dropped as seen, the rest refused: Ignored or Failed by the
// validators, Unvalidated (dropped at a full validation queue or
// throttled), OtherRefused (signature, blacklist, self-origin) — and the
// message ids in IHAVE, IWANT and IDONTWANT control messages, and GRAFTs
// and PRUNEs. Gated copies are not in Copies: the node dropped them before
// pubsub saw them, as identical to a copy still in pubsub's signature
// check (gossip's copy gate).
type PubsubMix struct {
	RPCs         float64 `json:"rpcs"`
	Copies       float64 `json:"message_copies"`
	First        float64 `json:"first_copies"`
	Duplicates   float64 `json:"duplicates"`
	IHaveIDs     float64 `json:"ihave_ids"`
	IWantIDs     float64 `json:"iwant_ids"`
	IDontWantIDs float64 `json:"idontwant_ids"`
	Grafts       float64 `json:"grafts"`
	Prunes       float64 `json:"prunes"`
	Ignored      float64 `json:"ignored"`
	Failed       float64 `json:"failed"`
	Unvalidated  float64 `json:"unvalidated"`
	OtherRefused float64 `json:"other_refused"`
	Gated        float64 `json:"gated"`
}

// InterestStats describes the nodes' interest at the end of a run: mean
// shard topics joined and agents held in the live view per node, and how
// many nodes subscribed to the announce topic (full scope, or a bridge
// for a node of the previous version).
type InterestStats struct {
	ShardsPerNode float64 `json:"shards_per_node"`
	ViewPerNode   float64 `json:"view_per_node"`
	AnnounceNodes int     `json:"announce_topic_nodes"`
}

// interestOf measures the interest of the nodes given.
func interestOf(nodes []*node.Node) InterestStats {
	var st InterestStats
	if len(nodes) == 0 {
		return st
	}
	for _, n := range nodes {
		g := n.Gossip()
		if g == nil {
			continue
		}
		st.ShardsPerNode += float64(len(g.Shards()))
		st.ViewPerNode += float64(n.View().Len())
		if !n.Scoped() || g.Bridging() {
			st.AnnounceNodes++
		}
	}
	st.ShardsPerNode /= float64(len(nodes))
	st.ViewPerNode /= float64(len(nodes))
	return st
}

// ChurnStats counts the churn and how fast views followed it.
type ChurnStats struct {
	Left      int `json:"left"`
	Crashed   int `json:"crashed"`
	Joined    int `json:"joined_fresh"`
	Restarted int `json:"restarted"`
	// CrashToGone: per crash, the time until no node that was up at the
	// crash (and still is) has the agent in its live view; CrashToGoneAll
	// until no live node at all has it, nodes that joined since included
	// (they may learn a dead agent from others). LeaveToGone and
	// LeaveToGoneAll the same for graceful leaves. JoinToVisible: per join
	// or restart, the time until every node that was up then has the agent
	// in its view.
	CrashToGone    Percentiles `json:"crash_to_gone"`
	CrashToGoneAll Percentiles `json:"crash_to_gone_all"`
	LeaveToGone    Percentiles `json:"leave_to_gone"`
	LeaveToGoneAll Percentiles `json:"leave_to_gone_all"`
	JoinToVisible  Percentiles `json:"join_to_visible"`
	// Unresolved ones had not completed when the run ended (Lingering:
	// gone from the survivors' views, still in a later joiner's); Revived
	// agents came back before every node dropped them; DiedBeforeVisible
	// left before every node saw them.
	CrashUnresolved int `json:"crash_unresolved"`
	CrashLingering  int `json:"crash_lingering"`
	LeaveUnresolved int `json:"leave_unresolved"`
	LeaveLingering  int `json:"leave_lingering"`
	JoinUnresolved  int `json:"join_unresolved"`
	Revived         int `json:"revived"`
	// Removals counts, by reason, the agents dropped from a node's view
	// other than by their own unregister (TIMEOUT: the seed's liveness
	// timeout; PEER_UNREACHABLE: early failure detection). FalseRemovals
	// counts those whose node was up at that moment: a live agent
	// evicted.
	Removals          map[string]int `json:"removals,omitempty"`
	FalseRemovals     map[string]int `json:"false_removals,omitempty"`
	DiedBeforeVisible int            `json:"died_before_visible"`
	// CloseErrors counts nodes that returned an error while stopping (for
	// example a flush of the address book that missed its deadline); the
	// first few are kept.
	CloseErrors       int      `json:"close_errors"`
	CloseErrorSamples []string `json:"close_error_samples,omitempty"`
	// Reconverge lists, after a heal or a mass join, how long until every
	// live node saw every live agent again (-1: not before the end).
	Reconverge []Reconverge `json:"reconverge,omitempty"`
}

// Reconverge is the time from an event to a complete view everywhere.
type Reconverge struct {
	Event EventKind `json:"event"`
	AtS   float64   `json:"at_s"`
	S     float64   `json:"after_s"`
}

// TrafficInfo is the network cost, per node per second of node uptime
// inside the measured window.
type TrafficInfo struct {
	NodeSeconds     float64                 `json:"node_seconds"`
	MsgsPerNodeS    float64                 `json:"msgs_per_node_s"`
	BytesOutPerNode float64                 `json:"bytes_out_per_node_s"`
	BytesInPerNode  float64                 `json:"bytes_in_per_node_s"`
	ByProtocol      map[string]ClassTraffic `json:"by_protocol"`
	// Bootstrap is the same per bootstrap node.
	BootstrapMsgsPerS  float64 `json:"bootstrap_msgs_per_node_s"`
	BootstrapBytesOutS float64 `json:"bootstrap_bytes_out_per_node_s"`
}

// ClassTraffic is one protocol family's share, per node per second.
type ClassTraffic struct {
	MsgsPerS     float64 `json:"msgs_per_s"`
	BytesOutPerS float64 `json:"bytes_out_per_s"`
}

// Resources is what the process used. Per-node figures divide the process
// total by the nodes up at the sample (agent and bootstrap nodes); they
// include the harness and the stores kept for restarts.
type Resources struct {
	Samples           int     `json:"samples"`
	PeakNodes         int     `json:"peak_nodes"`
	GoroutinesPerNode float64 `json:"goroutines_per_node"`
	// PeersPerNode is the mean number of peers an agent node is
	// connected to.
	PeersPerNode float64 `json:"peers_per_node"`
	// Conns splits PeersPerNode by why the connection manager keeps each.
	Conns          ConnsPerNode `json:"conns_per_node"`
	GoroutinesPeak int          `json:"goroutines_peak"`
	// HeapPerNodeMB and HeapPeakMB are the live heap (what survived the
	// last GC, independent of GOGC).
	HeapPerNodeMB float64 `json:"heap_per_node_mb"`
	HeapPeakMB    float64 `json:"heap_peak_mb"`
	// StacksPerNodeMB and StacksPeakMB are the goroutine stacks, which
	// the heap figures leave out.
	StacksPerNodeMB float64 `json:"stacks_per_node_mb"`
	StacksPeakMB    float64 `json:"stacks_peak_mb"`
	RSSPeakMB       float64 `json:"rss_peak_mb"`
	// CPUSeconds is the process's user+system CPU for the whole run
	// (warm-up included); RunCPUSeconds for the measured window only.
	CPUSeconds    float64 `json:"cpu_s"`
	RunCPUSeconds float64 `json:"run_cpu_s"`
	// ElapsedS is the scenario clock's elapsed time for the whole run
	// (virtual inside a synctest bubble).
	ElapsedS float64 `json:"elapsed_s"`
}

// Bucket is one interval of the time series.
type Bucket struct {
	StartS   float64  `json:"start_s"`
	Live     int      `json:"live_nodes"`
	Queries  int      `json:"queries"`
	Recall   *float64 `json:"recall,omitempty"`
	Stale    *float64 `json:"stale_rate,omitempty"`
	P50MS    float64  `json:"p50_ms"`
	P95MS    float64  `json:"p95_ms"`
	MsgsPerS float64  `json:"msgs_per_node_s"`
	BytesOut float64  `json:"bytes_out_per_node_s"`
	HeapMB   float64  `json:"heap_per_node_mb"`
}

// Mark is a network event on the timeline.
type Mark struct {
	AtS    float64   `json:"at_s"`
	Kind   EventKind `json:"kind"`
	Detail string    `json:"detail,omitempty"`
}

// Fixed pass criteria of KindSybil (issue 12): the per-peer quota of the
// live view, and the growth of the live heap per node (the process's
// growth shared by its nodes: every honest node receives the whole flood).
const (
	SybilMaxAdmitted     = 256
	SybilMaxHeapGrowthMB = 50
)

// Thresholds are the pass criteria of a run.
type Thresholds struct {
	MinRecall float64 `json:"min_recall"`
	MaxStale  float64 `json:"max_stale_rate"`
}

// Check compares the report with t, records t and the failures in the
// report, and returns the failures (empty when the run passed). A run that
// scored no query fails: there is nothing to vouch for.
func (r *Report) Check(t Thresholds) []string {
	r.Thresholds = &t
	r.Failures = nil
	q := r.Queries
	if q.Scored == 0 {
		r.Failures = append(r.Failures, "no query had a live provider to find: recall is unmeasured")
	} else if q.Recall < t.MinRecall {
		r.Failures = append(r.Failures, fmt.Sprintf("recall %.4f is below the minimum %.4f (%d of %d live providers found)", q.Recall, t.MinRecall, q.Found, q.Expected))
	}
	if q.StaleRate > t.MaxStale {
		r.Failures = append(r.Failures, fmt.Sprintf("stale rate %.4f is above the maximum %.4f (%d of %d returned providers dead for more than %gs)", q.StaleRate, t.MaxStale, q.Stale, q.Returned, r.Scenario.StaleAfterS))
	}
	if y := r.Sybil; y != nil {
		switch {
		case y.Published == 0:
			r.Failures = append(r.Failures, "sybil: the hostile peer published nothing")
		case y.GoneS < 0:
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: %d fake agents were still in honest views at the end", y.Left))
		}
		if y.MaxAdmitted > SybilMaxAdmitted {
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: an honest view held %d fakes, more than the per-peer quota %d", y.MaxAdmitted, SybilMaxAdmitted))
		}
		if y.IntervalMaxS > y.IntervalBeforeS {
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: honest heartbeat interval stretched from %gs to %gs", y.IntervalBeforeS, y.IntervalMaxS))
		}
		if y.FakeIntervalOver > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: honest views judged fakes by their claimed interval (%d samples over the bound, up to %gs)", y.FakeIntervalOver, y.FakeIntervalMaxS))
		}
		if y.AnswersMissed > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: %d of %d default-limit answers left out an honest agent", y.AnswersMissed, y.Answers))
		}
		if y.HeapGrowthPerNodeMB > SybilMaxHeapGrowthMB {
			r.Failures = append(r.Failures, fmt.Sprintf("sybil: the live heap grew by %.1f MB per node during the flood, more than %d MB", y.HeapGrowthPerNodeMB, SybilMaxHeapGrowthMB))
		}
	}
	if r.Interrupted {
		r.Failures = append(r.Failures, "the run was interrupted before its end")
	}
	if len(r.NodeErrors) > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d node operations failed, first: %s", len(r.NodeErrors), r.NodeErrors[0]))
	}
	return r.Failures
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the human summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	s := r.Scenario
	fmt.Fprintf(&b, "simnet: %s, %d nodes (+%d bootstrap), %s, seed %d\n", s.Kind, s.Nodes, s.BootstrapNodes, secs(s.DurationS), s.Seed)
	bw := "unlimited"
	if s.BandwidthBps > 0 {
		bw = fmt.Sprintf("%.0f B/s", s.BandwidthBps)
	}
	if s.Loss > 0 {
		bw += fmt.Sprintf(", %g%% packet loss", 100*s.Loss)
	}
	fmt.Fprintf(&b, "links: %gms ± %gms, bandwidth %s; queries %g/s; heartbeat %gs, liveness timeout %gs; scope %s; connections %d/%d, grace %gs\n", s.LatencyMS, s.JitterMS, bw, s.QueryRate, s.HeartbeatInterval, s.LivenessTimeoutS, s.Scope, s.ConnLow, s.ConnHigh, s.ConnGraceS)
	if s.MeshDegree > 0 {
		flood := "on"
		if !s.FloodPublish {
			flood = "off"
		}
		quiet := ""
		switch {
		case s.GossipBeatEvery > 1 && s.BeatRequests:
			quiet = fmt.Sprintf("; heartbeats on request (1 in %d on gossip for a node that asks)", s.GossipBeatEvery)
		case s.GossipBeatEvery > 1:
			quiet = fmt.Sprintf("; quiet heartbeats, 1 in %d on gossip", s.GossipBeatEvery)
		}
		trail := ""
		if s.Scope == "interest" && !s.TrailingSyncs {
			trail = "; no trailing shard syncs (sync 1.1.0)"
		}
		fmt.Fprintf(&b, "gossip: mesh degree %d, flood publishing %s%s%s\n", s.MeshDegree, flood, quiet, trail)
	}
	if r.Command != "" {
		fmt.Fprintf(&b, "command: %s\n", r.Command)
	}
	if r.Clock != "" {
		fmt.Fprintf(&b, "clock: %s\n", r.Clock)
	}
	conv := "not converged"
	if r.Setup.Converged {
		conv = fmt.Sprintf("every node saw every agent after %s", secs(r.Setup.ConvergedS))
	}
	fmt.Fprintf(&b, "warm-up: nodes registered in %s, %s\n\n", secs(r.Setup.StartS), conv)

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	// The tabwriter reports write errors at Flush.
	tf := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format, args...) }
	q := r.Queries
	row := func(k, v string) { tf("  %s\t%s\n", k, v) }
	tf("DISCOVERY\t\n")
	row("queries", fmt.Sprintf("%d issued, %d scored, %d without a live provider, %d skipped, %d aborted", q.Issued, q.Scored, q.NoProvider, q.Skipped, q.Aborted))
	row("recall", fmt.Sprintf("%s (%d/%d live providers; mean per query %s, %s of queries complete)", pct(q.Recall), q.Found, q.Expected, pct(q.RecallMean), pct(q.FullRecall)))
	if q.ExpectedAll != q.Expected {
		row("recall incl. unreachable", fmt.Sprintf("%s (%d/%d; the rest were across the partition)", pct(q.RecallAllLive), q.FoundAll, q.ExpectedAll))
	}
	row("stale rate", fmt.Sprintf("%s (%d of %d returned dead > %gs; %d of them marked stale by the resolver)", pct(q.StaleRate), q.Stale, q.Returned, s.StaleAfterS, q.StaleFlagged))
	if q.Stale > 0 {
		var bs []string
		for _, k := range sortedKeys(q.StaleBySource) {
			bs = append(bs, fmt.Sprintf("%s %d", k, q.StaleBySource[k]))
		}
		row("stale results", fmt.Sprintf("dead for %s (p50) to %s (max); by source: %s; %d at nodes that started after the death", secs(q.StaleDeadFor.P50/1000), secs(q.StaleDeadFor.Max/1000), strings.Join(bs, ", "), q.StaleAtLaterJoiner))
	}
	row("dead within timeout", fmt.Sprintf("%d returned (dead ≤ %gs, still in views by design)", q.DeadRecent, s.StaleAfterS))
	if q.Unreachable > 0 || q.Unknown > 0 {
		row("other", fmt.Sprintf("%d unreachable, %d unknown", q.Unreachable, q.Unknown))
	}
	if len(q.Errors) > 0 {
		var es []string
		for _, k := range sortedKeys(q.Errors) {
			es = append(es, fmt.Sprintf("%s %d", k, q.Errors[k]))
		}
		row("errors", strings.Join(es, ", "))
	}
	tf("\t\n")
	tf("LATENCY (ms)\tcount\tp50\tp95\tp99\tmax\n")
	prow := func(name string, p Percentiles) {
		tf("  %s\t%d\t%s\t%s\t%s\t%s\n", name, p.Count, ms(p.P50), ms(p.P95), ms(p.P99), ms(p.Max))
	}
	prow("lookup, all", r.Latency.All)
	for _, k := range sortedKeys(r.Latency.BySource) {
		prow("lookup, "+k, r.Latency.BySource[k])
	}
	prow("gossip propagation", r.Gossip.Propagation)
	for _, k := range sortedKeys(r.Gossip.ByKind) {
		if r.Gossip.ByKind[k].Count > 0 {
			prow("  "+k, r.Gossip.ByKind[k])
		}
	}
	c := r.Churn
	prow("crash → gone at survivors", c.CrashToGone)
	prow("crash → gone at every node", c.CrashToGoneAll)
	prow("leave → gone at survivors", c.LeaveToGone)
	prow("leave → gone at every node", c.LeaveToGoneAll)
	prow("join → seen everywhere", c.JoinToVisible)
	tf("\t\n")
	tf("CHURN\t\n")
	row("nodes", fmt.Sprintf("%d left, %d crashed, %d joined fresh, %d restarted", c.Left, c.Crashed, c.Joined, c.Restarted))
	row("unresolved at end", fmt.Sprintf("%d crashes and %d leaves still at survivors, %d and %d only at later joiners, %d joins unseen; %d revived before dropped, %d died before seen",
		c.CrashUnresolved, c.LeaveUnresolved, c.CrashLingering, c.LeaveLingering, c.JoinUnresolved, c.Revived, c.DiedBeforeVisible))
	if len(c.Removals) > 0 || len(c.FalseRemovals) > 0 {
		row("removals", fmt.Sprintf("%s; of live agents: %s", reasonCounts(c.Removals), reasonCounts(c.FalseRemovals)))
	}
	if c.CloseErrors > 0 {
		row("stop errors", fmt.Sprintf("%d nodes returned an error while stopping, e.g. %s", c.CloseErrors, firstLine(c.CloseErrorSamples[0])))
	}
	for _, rc := range c.Reconverge {
		v := "not before the end"
		if rc.S >= 0 {
			v = secs(rc.S)
		}
		row(fmt.Sprintf("complete views after %s at %s", rc.Event, secs(rc.AtS)), v)
	}
	tf("\t\n")
	if y := r.Sybil; y != nil {
		tf("SYBIL (one hostile peer)\t\n")
		row("flood", fmt.Sprintf("%d fake agents announced in %s, each with a heartbeat claiming a 1-day interval; then the peer crashed", y.Published, secs(y.FloodS)))
		row("admitted", fmt.Sprintf("at most %d fakes in one honest view (quota %d), %d summed over all nodes", y.MaxAdmitted, SybilMaxAdmitted, y.MaxAdmittedSum))
		gone := "not before the end"
		if y.GoneS >= 0 {
			gone = secs(y.GoneS) + " after the peer stopped"
		}
		row("fakes gone", fmt.Sprintf("%s (%d left at the end)", gone, y.Left))
		row("honest heartbeat interval", fmt.Sprintf("%gs before, at most %gs during", y.IntervalBeforeS, y.IntervalMaxS))
		row("fakes judged by", fmt.Sprintf("at most %gs (claimed: 1 day; bound %gs; %d samples over it)", y.FakeIntervalMaxS, y.FakeIntervalBoundS, y.FakeIntervalOver))
		row("default-limit answers", fmt.Sprintf("%d checked, %d left out an honest agent", y.Answers, y.AnswersMissed))
		row("live heap (all nodes)", fmt.Sprintf("%.0f MB before, at most %.0f MB during (+%.0f MB, %.1f MB per node)", y.HeapBeforeMB, y.HeapMaxMB, y.HeapMaxMB-y.HeapBeforeMB, y.HeapGrowthPerNodeMB))
		var rs []string
		for _, k := range sortedKeys(y.Refused) {
			rs = append(rs, fmt.Sprintf("%s %.0f", k, y.Refused[k]))
		}
		row("refusals (all nodes)", strings.Join(rs, ", "))
		row("hostile gossip score", fmt.Sprintf("lowest %.0f at an honest node", y.MinScore))
		tf("\t\n")
	}
	t := r.Traffic
	tf("COST (per node)\t\n")
	row("traffic", fmt.Sprintf("%.1f msg/s, %s/s out, %s/s in (%.0f node-seconds)", t.MsgsPerNodeS, bytesStr(t.BytesOutPerNode), bytesStr(t.BytesInPerNode), t.NodeSeconds))
	for _, k := range sortedKeys(t.ByProtocol) {
		ct := t.ByProtocol[k]
		row("  "+k, fmt.Sprintf("%.2f msg/s, %s/s out", ct.MsgsPerS, bytesStr(ct.BytesOutPerS)))
	}
	row("bootstrap node", fmt.Sprintf("%.1f msg/s, %s/s out", t.BootstrapMsgsPerS, bytesStr(t.BootstrapBytesOutS)))
	res := r.Resources
	row("goroutines", fmt.Sprintf("%.0f per node (peak %d in the process); %.0f connected peers per node", res.GoroutinesPerNode, res.GoroutinesPeak, res.PeersPerNode))
	if c := res.Conns; c.Protected+c.Young+c.Other > 0 {
		row("  connections", fmt.Sprintf("%.0f protected (%.0f view peers, %.0f DHT nearest buckets, %.0f only GossipSub meshes), %.0f younger than the grace period, %.0f others", c.Protected, c.View, c.DHT, c.MeshOnly, c.Young, c.Other))
	}
	row("live heap", fmt.Sprintf("%.2f MB per node (peak %.0f MB); stacks %.2f MB per node (peak %.0f MB)", res.HeapPerNodeMB, res.HeapPeakMB, res.StacksPerNodeMB, res.StacksPeakMB))
	row("RSS", fmt.Sprintf("peak %.0f MB, %.1f MB per node at the peak's node count (%d)", res.RSSPeakMB, perNode(res.RSSPeakMB, res.PeakNodes), res.PeakNodes))
	row("CPU", fmt.Sprintf("%.1f s total, %.1f s in the measured window (%.3f s per node per second)", res.CPUSeconds, res.RunCPUSeconds, perNodeSecond(res.RunCPUSeconds, t.NodeSeconds)))
	if i := r.Gossip.Interest; i.ShardsPerNode > 0 || i.ViewPerNode > 0 {
		row("interest", fmt.Sprintf("%.1f shard topics and %.1f agents in the view per node; %d nodes on the announce topic", i.ShardsPerNode, i.ViewPerNode, i.AnnounceNodes))
	}
	if m := r.Gossip.PubsubIn; m != nil && m.RPCs > 0 {
		row("pubsub in", fmt.Sprintf("%.1f RPCs/s: %.1f message copies (%.1f first, %.1f duplicates, refused %.1f ignored / %.1f failed / %.1f unvalidated / %.1f other; %.1f more dropped before validation as identical to a copy in it), %.1f IHAVE ids, %.1f IWANT ids, %.1f IDONTWANT ids, %.2f GRAFT, %.2f PRUNE",
			m.RPCs, m.Copies, m.First, m.Duplicates, m.Ignored, m.Failed, m.Unvalidated, m.OtherRefused, m.Gated, m.IHaveIDs, m.IWantIDs, m.IDontWantIDs, m.Grafts, m.Prunes))
	}
	if g := r.Gossip; g.ResendsUnmeasured > 0 {
		row("resends unmeasured", fmt.Sprintf("%d deliveries of resent announcements whose publication the probe did not see (not in propagation)", g.ResendsUnmeasured))
	}
	if g := r.Gossip; g.CatchUp > 0 {
		row("gossip catch-up", fmt.Sprintf("%d deliveries of messages signed before the delivering node had a mesh peer (history a joiner fetched; not in propagation)", g.CatchUp))
	}
	if g := r.Gossip; g.ProbeDropped+g.RPCDrops+g.Undeliverable > 0 {
		row("overload", fmt.Sprintf("%d probe drops, %d pubsub RPC drops, %d undeliverable", g.ProbeDropped, g.RPCDrops, g.Undeliverable))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Thresholds != nil {
		if len(r.Failures) == 0 {
			fmt.Fprintf(&b, "\nPASS: recall ≥ %g and stale rate ≤ %g\n", r.Thresholds.MinRecall, r.Thresholds.MaxStale)
		} else {
			fmt.Fprintf(&b, "\nFAIL:\n")
			for _, f := range r.Failures {
				fmt.Fprintf(&b, "  - %s\n", f)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func perNodeSecond(v, nodeSeconds float64) float64 {
	if nodeSeconds <= 0 {
		return 0
	}
	return v / nodeSeconds
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

func ms(f float64) string {
	switch {
	case f == 0:
		return "0"
	case f < 1:
		return fmt.Sprintf("%.3f", f)
	case f < 100:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.0f", f)
}

func secs(f float64) string {
	return (time.Duration(f * float64(time.Second))).Round(10 * time.Millisecond).String()
}

func bytesStr(f float64) string {
	switch {
	case f >= 1<<20:
		return fmt.Sprintf("%.2f MiB", f/(1<<20))
	case f >= 1<<10:
		return fmt.Sprintf("%.1f KiB", f/(1<<10))
	}
	return fmt.Sprintf("%.0f B", f)
}

// reasonCounts formats a count per reason, sorted by reason ("none" when
// empty).
func reasonCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func perNode(v float64, nodes int) float64 {
	if nodes <= 0 {
		return 0
	}
	return v / float64(nodes)
}
