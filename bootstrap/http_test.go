package bootstrap

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/bearer"
	"github.com/agentd/agentd/metrics"
	"github.com/golang-jwt/jwt/v5"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

const httpSecret = "0123456789abcdef0123456789abcdef-bootstrap"

func token(t *testing.T, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "prometheus", "scope": scope, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(httpSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A bootstrap node serves /healthz and /metrics, read-only, and the
// bearer rules of the API when auth is configured.
func TestBootstrapHTTP(t *testing.T) {
	mn := mocknet.New()
	defer func() { _ = mn.Close() }()
	h, err := mn.AddPeer(mustID(t).PeerKey, ma.StringCast("/ip4/10.1.0.1/tcp/4777"))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(false)
	n, err := StartNode(ctxT(t), h, NodeConfig{Metrics: m}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Close() }()

	get := func(handler http.Handler, method, path, remote, tok string) (int, string, http.Header) {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = remote
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b), rec.Header()
	}
	open := n.Handler(HTTPConfig{Registry: m.Registry, Version: "v-test"})
	code, body, hdr := get(open, "GET", "/healthz", "127.0.0.1:5000", "")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	var hz Health
	if err := json.Unmarshal([]byte(body), &hz); err != nil {
		t.Fatal(err)
	}
	if hz.Status != "ok" || hz.PeerID != h.ID().String() || hz.Version != "v-test" || hz.DHTMode != "server" ||
		hz.Relay != "off" || len(hz.Listen) != 1 || !strings.HasSuffix(hz.Listen[0], "/p2p/"+h.ID().String()) {
		t.Fatalf("/healthz = %+v", hz)
	}
	m.Provides.WithLabelValues("ok").Inc()
	if code, body, _ = get(open, "GET", "/metrics", "127.0.0.1:5000", ""); code != 200 || !strings.Contains(body, `agentd_dht_provides_total{outcome="ok"} 1`) {
		t.Fatalf("/metrics = %d\n%s", code, body)
	}
	for _, c := range []struct {
		method, path string
		code         int
		errCode      string
	}{
		{"POST", "/healthz", 405, `"error":"ErrMethodNotAllowed"`},
		{"DELETE", "/metrics", 405, `"error":"ErrMethodNotAllowed"`},
		{"GET", "/agents", 404, `"error":"ErrNotFound"`},
	} {
		if code, body, _ := get(open, c.method, c.path, "127.0.0.1:5000", ""); code != c.code || !strings.Contains(body, c.errCode) {
			t.Errorf("%s %s = %d %s, want %d %s", c.method, c.path, code, body, c.code, c.errCode)
		}
	}

	v, err := bearer.New(httpSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	authed := n.Handler(HTTPConfig{Registry: m.Registry, Auth: v})
	for _, c := range []struct {
		remote, tok string
		code        int
	}{
		{"127.0.0.1:5000", "", 200},                                      // loopback needs no token
		{"203.0.113.9:4000", "", 401},                                    // another address does
		{"203.0.113.9:4000", "not-a-jwt", 401},                           // a bad one is refused
		{"203.0.113.9:4000", token(t, bearer.ScopeWrite), 403},           // the read scope is required
		{"203.0.113.9:4000", token(t, bearer.ScopeRead), 200},            // and enough
		{"[2001:db8::1]:4000", token(t, "other "+bearer.ScopeRead), 200}, // among others
	} {
		code, body, hdr := get(authed, "GET", "/metrics", c.remote, c.tok)
		if code != c.code {
			t.Errorf("GET /metrics from %s with %q = %d %s, want %d", c.remote, c.tok, code, body, c.code)
		}
		if code == 401 && !strings.Contains(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a WWW-Authenticate challenge")
		}
	}
	strict := n.Handler(HTTPConfig{Registry: m.Registry, Auth: v, AuthOnLoopback: true})
	if code, _, _ := get(strict, "GET", "/healthz", "127.0.0.1:5000", ""); code != 401 {
		t.Fatalf("loopback without a token under requireAuthOnLoopback = %d, want 401", code)
	}
}
