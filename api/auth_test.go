package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

const testSecret = "0123456789abcdef0123456789abcdef-test-secret"

func hsToken(t testing.TB, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func esKey(t testing.TB) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func claims(scope string, exp time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": "test", "scope": scope, "iat": now.Unix(), "exp": now.Add(exp).Unix()}
}

func TestNewRefusesOpenNonLoopback(t *testing.T) {
	n := newNode(t, nodeOpts{})
	for _, cfg := range []Config{
		{Addr: "0.0.0.0:4778"},
		{Addr: "192.0.2.1:4778"},
		{RequireAuthOnLoopback: true},
		{ServeRegistry: true},
		{JWTSecret: "short"},
		{JWTPublicKeyPEM: []byte("not pem")},
		{Addr: "no-port"},
	} {
		if s, err := New(n.Node, cfg, nil); err == nil {
			_ = s.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	for _, cfg := range []Config{{Addr: "127.0.0.1:4778"}, {Addr: "[::1]:0"}, {Addr: "localhost:4778"}, {Addr: "0.0.0.0:1", JWTSecret: testSecret}} {
		s, err := New(n.Node, cfg, nil)
		if err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
			continue
		}
		_ = s.Close()
	}
}

func TestJWT(t *testing.T) {
	key, pubPEM := esKey(t)
	otherKey, _ := esKey(t)
	a := newAPI(t, Config{Addr: "0.0.0.0:4778", JWTSecret: testSecret, JWTPublicKeyPEM: pubPEM})
	es := func(k *ecdsa.PrivateKey, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// An HS256 token whose "secret" is the public key PEM: the classic
	// algorithm-confusion attack.
	confused := hsToken(t, string(pubPEM), claims("discover:read discover:write", time.Hour))
	rw := "discover:read discover:write"
	cases := []struct {
		name   string
		token  string
		status int
		code   string
	}{
		{"HS256", hsToken(t, testSecret, claims(rw, time.Hour)), 200, ""},
		{"ES256", es(key, claims(rw, time.Hour)), 200, ""},
		{"scopes array", hsToken(t, testSecret, jwt.MapClaims{"scopes": []string{"discover:read"}}), 200, ""},
		{"missing", "", 401, record.CodeAuth},
		{"expired", hsToken(t, testSecret, claims(rw, -time.Hour)), 401, record.CodeAuth},
		{"not yet valid", hsToken(t, testSecret, jwt.MapClaims{"scope": rw, "nbf": time.Now().Add(time.Hour).Unix()}), 401, record.CodeAuth},
		{"issued in the future", hsToken(t, testSecret, jwt.MapClaims{"scope": rw, "iat": time.Now().Add(time.Hour).Unix()}), 401, record.CodeAuth},
		{"wrong secret", hsToken(t, testSecret+"x", claims(rw, time.Hour)), 401, record.CodeAuth},
		{"wrong key", es(otherKey, claims(rw, time.Hour)), 401, record.CodeAuth},
		{"alg none", none(claims(rw, time.Hour)), 401, record.CodeAuth},
		{"alg confusion", confused, 401, record.CodeAuth},
		{"garbage", "a.b.c", 401, record.CodeAuth},
		{"bad scope claim", hsToken(t, testSecret, jwt.MapClaims{"scope": 7}), 401, record.CodeAuth},
		{"wrong scope", hsToken(t, testSecret, claims("discover:write", time.Hour)), 403, record.CodeForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []reqOpt
			if tc.token != "" {
				opts = append(opts, bearer(tc.token))
			}
			r := mustStatus(t, a.do("GET", "/agents", nil, opts...), tc.status)
			if tc.code == "" {
				return
			}
			e := r.apiErr(t)
			if e.Code != tc.code {
				t.Fatalf("%+v", e)
			}
			if tc.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
			}
			if tc.status == 403 && (e.Field != "scope" || !strings.Contains(r.header.Get("WWW-Authenticate"), "insufficient_scope")) {
				t.Fatalf("%+v %q", e, r.header.Get("WWW-Authenticate"))
			}
		})
	}
	readOnly := hsToken(t, testSecret, claims("discover:read", time.Hour))
	writeOnly := hsToken(t, testSecret, claims("discover:write", time.Hour))
	// Writes need discover:write.
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("s", "c")), bearer(readOnly)), 403)
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("s", "c")), bearer(writeOnly)), 200)
	// Health is open; metrics need read.
	mustStatus(t, a.do("GET", "/healthz", nil), 200)
	mustStatus(t, a.do("GET", "/readyz", nil), 200)
	mustStatus(t, a.do("GET", "/metrics", nil), 401)
	mustStatus(t, a.do("GET", "/metrics", nil, bearer(readOnly)), 200)
	// No Host guard beyond loopback.
	mustStatus(t, a.do("GET", "/agents", nil, bearer(readOnly), func(r *http.Request) { r.Host = "agentd.example:4778" }), 200)

	// JSON-RPC: authentication at the HTTP layer, scope per method.
	mustStatus(t, a.do("POST", "/rpc", call(1, MethodDiscover, map[string]any{})), 401)
	var resp rpcResp
	mustStatus(t, a.do("POST", "/rpc", call(1, MethodRegister, map[string]any{"agent_card": json.RawMessage(seedFile(t, "002-agent-card.json"))}), bearer(readOnly)), 200).json(t, &resp)
	if resp.Error == nil || resp.Error.Code != RPCForbidden || resp.Error.Data.Error != record.CodeForbidden {
		t.Fatalf("%+v", resp.Error)
	}
	mustStatus(t, a.do("POST", "/rpc", call(1, MethodDiscover, map[string]any{}), bearer(writeOnly)), 200).json(t, &resp)
	if resp.Error == nil || resp.Error.Code != RPCForbidden {
		t.Fatalf("%+v", resp.Error)
	}

	// WebSocket: the upgrade needs read, registering needs write.
	_, wresp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(a.url, "http")+"/ws", nil)
	if err == nil || wresp == nil || wresp.StatusCode != 401 {
		t.Fatalf("unauthenticated upgrade: %v %v", err, wresp)
	}
	w := a.dialWS(t, "", http.Header{"Authorization": {"Bearer " + readOnly}})
	w.sendText(`{"type":"register","id":"agent-1","name":"A"}`)
	if m := w.readJSON(record.WSTypeError); m["code"] != record.CodeForbidden {
		t.Fatalf("%v", m)
	}
	w.sendText(`{"type":"list"}`)
	w.readJSON(record.WSTypeAgents)
}

func TestRequireAuthOnLoopback(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, RequireAuthOnLoopback: true})
	mustStatus(t, a.do("GET", "/agents", nil), 401)
	mustStatus(t, a.do("GET", "/agents", nil, bearer(hsToken(t, testSecret, claims(ScopeRead, time.Hour)))), 200)
	// Without RequireAuthOnLoopback a configured secret leaves loopback open.
	b := newAPI(t, Config{JWTSecret: testSecret})
	mustStatus(t, b.do("GET", "/agents", nil), 200)
}

// Registry mode (seed 000 §3.2): a signed Announce of another peer's agent
// is verified and served from the view; it needs a write token even on
// loopback.
func TestRegistryMode(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, ServeRegistry: true})
	other := newNode(t, nodeOpts{})
	agentID := uuid.NewString()
	sa, _ := signedBy(t, other, spec("skill-r", "cap-r"), agentID, 3)
	co, err := sa.CoSign(other.id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	body := co.MarshalAnnounce()
	r := mustStatus(t, a.do("POST", "/agents", body), 401)
	if e := r.apiErr(t); e.Code != record.CodeAuth {
		t.Fatalf("%+v", e)
	}
	mustStatus(t, a.do("POST", "/agents", body, bearer(hsToken(t, testSecret, claims(ScopeRead, time.Hour)))), 403)
	var e AgentEntry
	mustStatus(t, a.do("POST", "/agents", body, bearer(hsToken(t, testSecret, claims(ScopeWrite, time.Hour)))), 200).json(t, &e)
	if e.Source != "registry" {
		t.Fatalf("%+v", e)
	}
	var l AgentList
	mustStatus(t, a.do("GET", "/agents?capability=cap-r", nil), 200).json(t, &l)
	if l.Total != 1 || l.Agents[0].Source != "registry" {
		t.Fatalf("%+v", l)
	}
	// Without the peer signature the record does not verify.
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	delete(m, "peer_signature")
	m["signature"] = base64.StdEncoding.EncodeToString(sa.Signature)
	r = mustStatus(t, a.do("POST", "/agents", m, bearer(hsToken(t, testSecret, claims(ScopeWrite, time.Hour)))), 400)
	if e := r.apiErr(t); e.Field != "peer_signature" {
		t.Fatalf("%+v", e)
	}
}

// Registry mode over the agent-discovery binding: the token of the
// upgrade authorizes the foreign ANNOUNCE.
func TestRegistryModeWebSocket(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, ServeRegistry: true})
	other := newNode(t, nodeOpts{})
	sa, _ := signedBy(t, other, spec("skill-rw", "cap-rw"), uuid.NewString(), 2)
	co, err := sa.CoSign(other.id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte{MsgAnnounce}, co.MarshalAnnounce()...)

	w := a.dialWS(t, Subprotocol, nil)
	w.send(websocket.MessageBinary, frame)
	if m := w.readJSON(record.WSTypeError); m["code"] != record.CodeAuth {
		t.Fatalf("%v", m)
	}
	tok := hsToken(t, testSecret, claims(ScopeRead+" "+ScopeWrite, time.Hour))
	w = a.dialWS(t, Subprotocol, http.Header{"Authorization": {"Bearer " + tok}})
	w.send(websocket.MessageBinary, frame)
	if _, b := w.read(); b[0] != MsgAnnounce {
		t.Fatalf("%s", b)
	}
	var l AgentList
	mustStatus(t, a.do("GET", "/agents?capability=cap-rw", nil), 200).json(t, &l)
	if l.Total != 1 || l.Agents[0].Source != "registry" {
		t.Fatalf("%+v", l)
	}
}
