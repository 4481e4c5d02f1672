package main

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// healthInfo is what GET /healthz reports.
type healthInfo struct {
	start   time.Time
	id      *trust.Identity
	net     network
	version string
}

// healthResponse is the body of GET /healthz.
type healthResponse struct {
	Status          string   `json:"status"`
	AgentID         string   `json:"agent_id"`
	PeerID          string   `json:"peer_id"`
	Listen          []string `json:"listen"`
	UptimeSeconds   float64  `json:"uptime_seconds"`
	Version         string   `json:"version"`
	ProtocolVersion string   `json:"protocol_version"`
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// newAPIHandler serves the local API. Today that is GET /healthz; package
// api will take over the rest. When the API is bound to loopback, requests
// whose Host header names anything but a loopback address or localhost are
// refused, so a web page cannot reach the API through DNS rebinding.
func newAPIHandler(bound net.Addr, h healthInfo) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", h.serveHealth)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: record.CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
	loopback := false
	if ta, ok := bound.(*net.TCPAddr); ok {
		loopback = ta.IP.IsLoopback()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopback && !loopbackHost(r.Host) {
			writeJSON(w, http.StatusMisdirectedRequest, errorBody{Error: record.CodeForbidden, Message: "this API serves loopback clients only; Host must be localhost or a loopback address"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		// [::1] without a port
		if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
			ip, err = netip.ParseAddr(host[1 : len(host)-1])
		}
		if err != nil {
			return false
		}
	}
	return ip.IsLoopback()
}

func (h healthInfo) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: record.CodeMethodNotAllowed, Message: r.Method + " is not allowed; use GET"})
		return
	}
	up := time.Since(h.start).Seconds()
	writeJSON(w, http.StatusOK, healthResponse{
		Status:          "ok",
		AgentID:         h.id.AgentID,
		PeerID:          h.id.PeerID.String(),
		Listen:          p2pAddrs(h.net.Addrs(), h.id.PeerID),
		UptimeSeconds:   math.Round(up*1000) / 1000,
		Version:         h.version,
		ProtocolVersion: record.ProtocolVersion,
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
