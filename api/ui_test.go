package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The console's files are embedded and served at /ui/ with a strict
// content security policy; anything else under /ui/ is 404; the files
// carry no node data, so they need no token even where the API does.
func TestConsoleFiles(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, RequireAuthOnLoopback: true})
	// GET /ui redirects to /ui/ (the client follows it).
	r := a.do("GET", "/ui", nil)
	if r.status != 200 || !strings.Contains(string(r.body), "<title>agentd console</title>") {
		t.Fatalf("GET /ui: %d %v", r.status, r.header)
	}
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/index.html": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		r := a.do("GET", path, nil)
		if r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), ctype) || len(r.body) == 0 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.header.Get("Content-Type"))
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || r.header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("GET %s: CSP %q", path, csp)
		}
	}
	if r := a.do("GET", "/ui/../openapi.json", nil); r.status == 200 && strings.Contains(string(r.body), "openapi") && r.header.Get("Content-Security-Policy") != "" {
		t.Fatal("a path outside the console was served as a console file")
	}
	if r := a.do("GET", "/ui/secret.txt", nil); r.status != 404 {
		t.Fatalf("GET /ui/secret.txt: %d", r.status)
	}
	if r := a.do("POST", "/ui/", nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /ui/: %d", r.status)
	}
	// The data behind the console still needs the token.
	if r := a.do("GET", "/healthz", nil); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	if r := a.do("GET", "/explain?capability=x&local_only=true", nil); r.status != 401 {
		t.Fatalf("explain without a token: %d", r.status)
	}
}

// A browser cannot set an Authorization header on a WebSocket: the console
// offers its token as the subprotocol agentd.bearer.<token>, which the API
// reads as a bearer token and never selects.
func TestWebSocketTokenSubprotocol(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, RequireAuthOnLoopback: true})
	url := "ws" + strings.TrimPrefix(a.url, "http") + "/ws"
	dial := func(protos ...string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: protos})
	}
	if _, resp, err := dial(); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("no token: %v %v", err, resp)
	}
	if _, resp, err := dial(uiSubprotocolPrefix + "not-a-token"); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("bad token: %v %v", err, resp)
	}
	tok := hsToken(t, testSecret, claims(ScopeRead, time.Hour))
	c, _, err := dial(uiSubprotocol, uiSubprotocolPrefix+tok)
	if err != nil {
		t.Fatalf("token as subprotocol: %v", err)
	}
	defer func() { _ = c.CloseNow() }()
	if c.Subprotocol() != uiSubprotocol {
		t.Fatalf("the server selected %q", c.Subprotocol())
	}
	w := &wsClient{t: t, c: c}
	w.sendText(`{"type":"watch"}`)
	if _, b := w.read(); !strings.Contains(string(b), `"watching"`) {
		t.Fatalf("watch answer %s", b)
	}
}
