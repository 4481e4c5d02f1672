package api

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/agentd/agentd/record"
)

// The operator's console (docs/console.md): three static files embedded in
// the binary, served at /ui/. They hold no node data; every value the
// console shows comes from the API it calls, with the token the operator
// enters (kept in the browser's session storage), under the same access
// rules as any client. So the files are served without a token, like
// /healthz: a browser cannot attach a bearer token to a navigation.
//
//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// uiSubprotocolPrefix carries a bearer token in a WebSocket's
// Sec-WebSocket-Protocol header, where a browser, which cannot set an
// Authorization header on a WebSocket, can put it: the console opens /ws
// offering the subprotocols "agentd.console" and "agentd.bearer.<token>".
// The server selects agentd.console (a browser refuses a handshake that
// selects none of those it offered), never the token, and the session
// speaks the JSON frames of docs/api.md.
const (
	uiSubprotocolPrefix = "agentd.bearer."
	uiSubprotocol       = "agentd.console"
)

func (s *Server) uiRoutes(mux *http.ServeMux) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	o := routeOpts{surface: surfaceUI, scope: scopeOpen}
	mux.Handle("GET /ui", s.wrap(o, func(w http.ResponseWriter, r *http.Request) error {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		return nil
	}))
	mux.Handle("GET /ui/", s.wrap(o, func(w http.ResponseWriter, r *http.Request) error {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name != "" && name != "index.html" && name != "app.js" && name != "style.css" {
			return newError(http.StatusNotFound, record.CodeNotFound, "", "the console has no file %q", truncate(name))
		}
		hd := w.Header()
		hd.Set("Content-Security-Policy", uiCSP(r.Host))
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
		return nil
	}))
}

// uiCSP is the console's content security policy: its own files only, no
// inline script or style, API calls and the event WebSocket to this host.
func uiCSP(host string) string {
	connect := "'self'"
	if safeHost(host) {
		connect += " ws://" + host + " wss://" + host
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
		"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// safeHost reports whether a Host header can go into a header value as is.
func safeHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	return strings.IndexFunc(h, func(c rune) bool {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		return !alnum && !strings.ContainsRune(".-:[]", c)
	}) < 0
}

// wsTokenFromSubprotocol moves a bearer token offered as a WebSocket
// subprotocol (uiSubprotocolPrefix) into the Authorization header of a /ws
// request that has none, so that the route's authentication sees it.
func wsTokenFromSubprotocol(r *http.Request) {
	if r.URL.Path != "/ws" || r.Header.Get("Authorization") != "" {
		return
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), uiSubprotocolPrefix); ok && tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
				return
			}
		}
	}
}
