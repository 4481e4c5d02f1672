// Package metrics defines agentd's Prometheus metrics. Each node owns its
// own registry (never the global one), so many nodes can run in one process
// (simnet) and each exposes only its own figures on GET /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector of one node. A nil *Metrics is valid and
// records nothing, so packages can be used without metrics in tests.
type Metrics struct {
	Registry *prometheus.Registry

	// Rejects counts inputs refused, by transport (gossip, dht, lan, api,
	// udp, mdns) and reason (trust.Reason values and parse failures).
	Rejects *prometheus.CounterVec
	// Lookups counts discovery results by source (local, lan, dht,
	// skillcenter, cache) and outcome (hit, miss, error).
	Lookups *prometheus.CounterVec
	// LookupLatency observes resolver latency by the source that answered.
	LookupLatency *prometheus.HistogramVec
	// GossipDelivered counts accepted gossip messages by type.
	GossipDelivered *prometheus.CounterVec
	// GossipPublished counts messages this node published, by type.
	GossipPublished *prometheus.CounterVec
	// CopiesGated counts received gossip message copies dropped before
	// pubsub's signature check as identical to a copy still in it.
	CopiesGated prometheus.Counter
	// Resends counts resent announcements (gossip.ResendProtocol): those
	// this node published (direction "sent") and those it forwarded
	// holding the record already ("forwarded").
	Resends *prometheus.CounterVec
	// TrailsSkipped counts the trailing re-announcements of hosted agents
	// this node left out because every peer of the agents' shard topics
	// makes trailing syncs (gossip.TrailSyncProtocol).
	TrailsSkipped prometheus.Counter
	// BatchedBeats counts heartbeats published inside heartbeat batches
	// (one per entry and topic; the batches themselves are
	// GossipPublished{type="beats"}).
	BatchedBeats prometheus.Counter
	// Peers is the number of connected libp2p peers.
	Peers prometheus.Gauge
	// Records is the number of records in the cache, by state (fresh, stale).
	Records *prometheus.GaugeVec
	// LiveAgents is the number of agents in the live view by status.
	LiveAgents *prometheus.GaugeVec
	// Fetches counts /agentd/record/1.0.0 fetches by outcome.
	Fetches *prometheus.CounterVec
	// Provides counts DHT provide operations by outcome.
	Provides *prometheus.CounterVec
	// ValuePuts counts puts of hosted records' DHT values by outcome.
	ValuePuts *prometheus.CounterVec
	// DHTLookups counts the closest-peer lookups before provides and
	// puts: run, or saved (a small network's last answer stood in).
	DHTLookups *prometheus.CounterVec
	// LANPackets counts LAN datagrams by mechanism (udp, mdns) and outcome.
	LANPackets *prometheus.CounterVec
	// HTTPRequests counts API requests by surface and status code.
	HTTPRequests *prometheus.CounterVec
	// Suspicions counts peers suspected after their last connection
	// closed, by outcome (alive, refuted, confirmed, unconfirmed).
	Suspicions *prometheus.CounterVec
	// DownClaims counts peer_down claims received on the liveness topic,
	// by outcome (confirmed, refuted, duplicate, uninterested, malformed,
	// rate_limited, self), and this node's own claims not published
	// because another node's about the same peer came first (suppressed).
	DownClaims *prometheus.CounterVec
	// ShardSyncs counts the syncs of a shard a scoped node asked its
	// topic's peers for, by outcome (ok, error).
	ShardSyncs *prometheus.CounterVec
	// TrailSyncs counts the trailing shard syncs (gossip
	// TrailSyncProtocol; not in ShardSyncs), by outcome (ok, error).
	TrailSyncs *prometheus.CounterVec
	// Probes counts /agentd/probe/1.0.0 requests served, by answer
	// (reachable, unreachable, refused).
	Probes *prometheus.CounterVec
	// Pulls counts heartbeat pulls this node asked of a late agent's host
	// (/agentd/heartbeat/1.0.0), by outcome (news, no_news, unsupported,
	// error); PullsServed those it answered, by answer (ok, rate_limited,
	// busy, malformed).
	Pulls       *prometheus.CounterVec
	PullsServed *prometheus.CounterVec
	// BeatRequests counts beat requests (gossip.KindWanted): sent by this
	// node where a pull of a host failed, or received by this host for
	// agents it hosts.
	BeatRequests *prometheus.CounterVec
}

// New creates the collectors on a fresh registry. withRuntime adds the Go
// and process collectors (off in simnet, where they would be shared).
func New(withRuntime bool) *Metrics {
	r := prometheus.NewRegistry()
	if withRuntime {
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &Metrics{
		Registry: r,
		Rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_validation_rejects_total", Help: "Inputs refused, by transport and reason.",
		}, []string{"transport", "reason"}),
		Lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_lookups_total", Help: "Discovery lookups by answering source and outcome.",
		}, []string{"source", "outcome"}),
		LookupLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentd_lookup_duration_seconds", Help: "Resolver latency by answering source.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"source"}),
		GossipDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_gossip_delivered_total", Help: "Gossip messages accepted, by type.",
		}, []string{"type"}),
		GossipPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_gossip_published_total", Help: "Gossip messages published by this node, by type.",
		}, []string{"type"}),
		CopiesGated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_gossip_copies_gated_total", Help: "Gossip message copies dropped before signature checking as identical to a copy being checked.",
		}),
		Resends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_gossip_resends_total", Help: "Resent announcements: published by this node (sent), or forwarded holding the record already (forwarded).",
		}, []string{"direction"}),
		TrailsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_gossip_trailing_announcements_skipped_total", Help: "Trailing re-announcements of hosted agents left out because every peer of their shard topics makes trailing syncs.",
		}),
		BatchedBeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_gossip_batched_beats_total", Help: "Heartbeats published inside heartbeat batches, one per entry and topic.",
		}),
		Peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_peers", Help: "Connected libp2p peers.",
		}),
		Records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentd_records", Help: "Records in the cache, by state.",
		}, []string{"state"}),
		LiveAgents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentd_live_agents", Help: "Agents in the live view, by status.",
		}, []string{"status"}),
		Fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_record_fetches_total", Help: "Record fetches over /agentd/record/1.0.0, by outcome.",
		}, []string{"outcome"}),
		Provides: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_dht_provides_total", Help: "DHT provide operations, by outcome.",
		}, []string{"outcome"}),
		ValuePuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_dht_value_puts_total", Help: "Puts of hosted records' DHT values (/agentd/<agent id>), by outcome; paced by dht.valuePutRate.",
		}, []string{"outcome"}),
		DHTLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_dht_lookups_total", Help: "Closest-peer lookups before DHT provides and value puts: run, or saved (in a network smaller than a lookup's answer, the last answer stands in).",
		}, []string{"outcome"}),
		LANPackets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_lan_packets_total", Help: "LAN packets by mechanism and outcome.",
		}, []string{"mechanism", "outcome"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_http_requests_total", Help: "Local API requests by surface and status code.",
		}, []string{"surface", "code"}),
		Suspicions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_liveness_suspicions_total", Help: "Peers suspected after their last connection closed, by outcome.",
		}, []string{"outcome"}),
		DownClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_liveness_claims_total", Help: "peer_down claims received, by outcome.",
		}, []string{"outcome"}),
		ShardSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_gossip_shard_syncs_total", Help: "Shard syncs asked of shard-topic peers, by outcome.",
		}, []string{"outcome"}),
		TrailSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_gossip_trailing_syncs_total", Help: "Trailing shard syncs (a second sync of a joined shard a second after the first), by outcome.",
		}, []string{"outcome"}),
		Probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_liveness_probes_served_total", Help: "Liveness probes served for other nodes, by answer.",
		}, []string{"answer"}),
		Pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_heartbeat_pulls_total", Help: "Heartbeat pulls asked of late agents' hosts, by outcome.",
		}, []string{"outcome"}),
		PullsServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_heartbeat_pulls_served_total", Help: "Heartbeat pulls answered for other nodes, by answer.",
		}, []string{"answer"}),
		BeatRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_heartbeat_requests_total", Help: "Requests that a host put heartbeats on gossip: sent where a pull failed, or received for hosted agents.",
		}, []string{"direction"}),
	}
	// Liveness outcomes exist from the start, so a dashboard shows zeros
	// rather than nothing.
	for _, o := range []string{"alive", "refuted", "confirmed", "unconfirmed", "queue_full"} {
		m.Suspicions.WithLabelValues(o)
	}
	for _, o := range []string{"ok", "error"} {
		m.ShardSyncs.WithLabelValues(o)
		m.TrailSyncs.WithLabelValues(o)
	}
	for _, o := range []string{"news", "no_news", "unsupported", "error"} {
		m.Pulls.WithLabelValues(o)
	}
	for _, d := range []string{"sent", "forwarded"} {
		m.Resends.WithLabelValues(d)
	}
	for _, d := range []string{"sent", "received"} {
		m.BeatRequests.WithLabelValues(d)
	}
	// The gossip message types (gossip.Kind*): a counter exists before the
	// first message of its type.
	for _, k := range []string{"announce", "heartbeat", "status", "unregister", "beats", "wanted"} {
		m.GossipDelivered.WithLabelValues(k)
		m.GossipPublished.WithLabelValues(k)
	}
	for _, o := range []string{"confirmed", "refuted", "duplicate", "uninterested", "no_address", "malformed", "unsupported_version", "stale", "rate_limited", "self", "suppressed"} {
		m.DownClaims.WithLabelValues(o)
	}
	r.MustRegister(m.Rejects, m.Lookups, m.LookupLatency, m.GossipDelivered, m.GossipPublished, m.BatchedBeats, m.CopiesGated, m.Resends, m.TrailsSkipped,
		m.Peers, m.Records, m.LiveAgents, m.Fetches, m.Provides, m.ValuePuts, m.DHTLookups, m.LANPackets, m.HTTPRequests,
		m.Suspicions, m.DownClaims, m.ShardSyncs, m.TrailSyncs, m.Probes, m.Pulls, m.PullsServed, m.BeatRequests)
	return m
}

// Reject counts one refused input. Safe on a nil receiver.
func (m *Metrics) Reject(transport, reason string) {
	if m == nil {
		return
	}
	m.Rejects.WithLabelValues(transport, reason).Inc()
}

// Inc increments a counter vector's labelled child. Safe on a nil receiver.
func (m *Metrics) Inc(v func(*Metrics) *prometheus.CounterVec, labels ...string) {
	if m == nil {
		return
	}
	v(m).WithLabelValues(labels...).Inc()
}

// WatchSpace exports the store's free-space guard: agentd_store_free_bytes,
// agentd_store_min_free_bytes and agentd_store_writes_refused_total (writes
// refused because the disk was below the reserve). read is called at each
// scrape.
func (m *Metrics) WatchSpace(read func() (free, reserve, refused uint64)) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentd_store_free_bytes", Help: "Free space on the data directory's filesystem (for unprivileged users).",
		}, func() float64 { f, _, _ := read(); return float64(f) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentd_store_min_free_bytes", Help: "The reserve (storage.minFree): writes are refused while less is free.",
		}, func() float64 { _, r, _ := read(); return float64(r) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "agentd_store_writes_refused_total", Help: "Writes refused because the disk was below the reserve.",
		}, func() float64 { _, _, n := read(); return float64(n) }),
	)
}
