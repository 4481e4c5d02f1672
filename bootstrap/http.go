package bootstrap

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/agentd/agentd/internal/bearer"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPConfig configures a bootstrap node's HTTP surface: GET /healthz and
// GET /metrics, read-only.
type HTTPConfig struct {
	// Registry is served at /metrics (agentd's DHT metrics and, when the
	// host was built with it, go-libp2p's: relay service, hole punching,
	// AutoNAT, swarm).
	Registry *prometheus.Registry
	// Version is reported by /healthz.
	Version string
	// Auth, when set, requires a bearer token with the discover:read scope
	// from clients that are not on loopback (every client with
	// AuthOnLoopback).
	Auth           *bearer.Verifier
	AuthOnLoopback bool
}

// Health is the answer of a bootstrap node's GET /healthz.
type Health struct {
	Status          string   `json:"status"` // "ok"
	PeerID          string   `json:"peer_id"`
	Listen          []string `json:"listen"` // full multiaddrs, for clients' --bootstrap
	UptimeSeconds   float64  `json:"uptime_seconds"`
	Version         string   `json:"version"`
	Peers           int      `json:"peers"`
	RelayedPeers    int      `json:"relayed_peers"` // peers connected only through a relay
	DHTRoutingTable int      `json:"dht_routing_table"`
	DHTMode         string   `json:"dht_mode"`     // "server" (a bootstrap node always is)
	Reachability    string   `json:"reachability"` // "public" unless configured otherwise
	// Relay is "on" while the circuit relay v2 service runs (it runs only
	// while the node is public), "off" otherwise.
	Relay string `json:"relay"`
}

// Health reports the node's state.
func (n *Node) Health() Health {
	h := Health{Status: "ok", PeerID: n.h.ID().String(), Listen: []string{}, DHTMode: "server", Relay: "off"}
	for _, a := range n.Addrs() {
		h.Listen = append(h.Listen, a.String())
	}
	h.UptimeSeconds = math.Round(time.Since(n.start).Seconds()*1000) / 1000
	for _, p := range n.h.Network().Peers() {
		h.Peers++
		if p2p.OnlyRelayed(n.h.Network().ConnsToPeer(p)) {
			h.RelayedPeers++
		}
	}
	st := n.DHT.Status()
	h.DHTRoutingTable = st.RoutingTable
	if st.ClientMode {
		h.DHTMode = "client"
	}
	if slices.Contains(n.h.Mux().Protocols(), protocol.ID(p2p.HopProtocol)) {
		h.Relay = "on"
	}
	h.Reachability = n.reach.String()
	return h
}

// Handler serves GET /healthz and GET /metrics.
func (n *Node) Handler(cfg HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := n.Health()
		h.Version = cfg.Version
		writeJSON(w, http.StatusOK, h)
	})
	metrics := promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, record.CodeNotFound, "a bootstrap node serves GET /healthz and GET /metrics only")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, record.CodeMethodNotAllowed, "a bootstrap node's HTTP surface is read-only")
			return
		}
		if cfg.Auth != nil && (cfg.AuthOnLoopback || !loopbackClient(r)) {
			c, err := cfg.Auth.FromRequest(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentd-bootstrap"`)
				writeError(w, http.StatusUnauthorized, record.CodeAuth, err.Error())
				return
			}
			if !c.Has(bearer.ScopeRead) {
				writeError(w, http.StatusForbidden, record.CodeForbidden, "the token lacks the "+bearer.ScopeRead+" scope")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with the seed-000 error shape
// ({"error":"ErrAuth","message":"..."}).
func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]string{"error": errCode, "message": msg})
}
