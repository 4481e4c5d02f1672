package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/mcpserver"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultRequestTimeout = 15 * time.Second
	DefaultWSHeartbeat    = 30 * time.Second
)

// ErrClosed is returned (as 503 ErrUnavailable) by requests that arrive
// after Close.
var ErrClosed = errors.New("api server closed")

// Config configures the API. Zero values take the defaults.
type Config struct {
	// Addr is the address the API listens on (host:port). It decides the
	// loopback rules: on a loopback address the API is open to local
	// clients (unless RequireAuthOnLoopback) and refuses requests whose
	// Host header is not a loopback name (DNS rebinding); on any other
	// address every request but /healthz and /readyz needs a bearer token.
	// Empty means loopback (tests serving through httptest).
	Addr string
	// JWTSecret (HS256, at least 32 bytes) and/or JWTPublicKeyPEM (ES256,
	// a P-256 public key or certificate in PEM) verify bearer tokens.
	// Both empty: no authentication, which New accepts only on loopback.
	JWTSecret       string
	JWTPublicKeyPEM []byte
	// RequireAuthOnLoopback requires bearer tokens on loopback too.
	RequireAuthOnLoopback bool
	// ServeRegistry accepts signed Announces of agents hosted by other
	// peers on POST /agents (seed-000 registry mode): they are verified and
	// kept in the live view until they stop re-announcing. It needs an
	// authenticator; those requests always need a discover:write token.
	ServeRegistry bool
	// AgentCard names the hosted agent whose A2A Agent Card the API serves
	// at /.well-known/agent-card.json ("self": the node's own agent id;
	// empty: none), so that A2A clients find it the A2A way.
	AgentCard string
	// MaxBodyBytes bounds a request body (default 1 MiB). The messages in
	// it have their own, smaller limits (record.MaxMessageBytes).
	MaxBodyBytes int64
	// RequestTimeout bounds every request except WebSocket sessions
	// (default 15 s).
	RequestTimeout time.Duration
	// WSHeartbeat is the WebSocket heartbeat (default 30 s, seed 000
	// §5.3): the server pings every interval and closes a connection whose
	// pong does not arrive within the next one. It is also how long an
	// agent registered over a WebSocket outlives its connection.
	WSHeartbeat time.Duration
	// Version is reported by /healthz.
	Version string
}

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.WSHeartbeat <= 0 {
		c.WSHeartbeat = DefaultWSHeartbeat
	}
}

// Server is the local API of one node. Create it with New, serve
// Handler() from an http.Server, and Close it before closing the node.
type Server struct {
	n        *node.Node
	cfg      Config
	log      *slog.Logger
	m        *metrics.Metrics
	auth     *authenticator // nil: no authentication configured
	authAll  bool           // every request (but health) needs a token
	loopback bool
	handler  http.Handler
	mux      *http.ServeMux
	patterns []string // "METHOD /path" of every route, for the OpenAPI test
	start    time.Time

	ctx    context.Context // ends at Close: WebSocket sessions and watches
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
	wsBound  map[string]*session      // agent id → the connection it is bound to
	rpcTTL   map[string]time.Duration // agent id → ttl_seconds of its JSON-RPC registration
	warned   map[string]bool          // newer minor protocol versions already logged

	mcp *mcpserver.Server // the MCP server of /mcp (mcp.go)
}

// New builds the API over a node. It checks the configuration: a
// non-loopback Addr, RequireAuthOnLoopback and ServeRegistry all need a
// JWT secret or public key.
func New(n *node.Node, cfg Config, log *slog.Logger) (*Server, error) {
	if n == nil {
		return nil, errors.New("api: a node is required")
	}
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	auth, err := newAuthenticator(cfg.JWTSecret, cfg.JWTPublicKeyPEM)
	if err != nil {
		return nil, err
	}
	loop, err := isLoopbackAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		n: n, cfg: cfg, log: log, m: n.Metrics(), auth: auth, loopback: loop,
		authAll:  !loop || cfg.RequireAuthOnLoopback,
		start:    time.Now(),
		sessions: map[*session]struct{}{}, wsBound: map[string]*session{},
		rpcTTL: map[string]time.Duration{}, warned: map[string]bool{},
	}
	switch {
	case s.authAll && auth == nil && !loop:
		return nil, fmt.Errorf("api: %s is not a loopback address; serving the API beyond this machine needs a JWT secret or public key", cfg.Addr)
	case s.authAll && auth == nil:
		return nil, errors.New("api: RequireAuthOnLoopback needs a JWT secret or public key")
	case cfg.ServeRegistry && auth == nil:
		return nil, errors.New("api: ServeRegistry needs a JWT secret or public key (registry clients must authenticate)")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// Handler returns the HTTP handler of every surface.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends the WebSocket sessions and watch streams and waits for their
// goroutines. Agents registered over a WebSocket get a lease of one
// heartbeat window, so a client that reconnects (to this node after a
// restart) keeps its registration. Requests arriving afterwards get 503.
// Close is idempotent; call it before closing the node.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.closeMCP()
	s.wg.Wait()
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// isLoopbackAddr reports whether host:port names a loopback address.
func isLoopbackAddr(addr string) (bool, error) {
	if addr == "" {
		return true, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("api: address %q: %w", addr, err)
	}
	return loopbackHost(host), nil
}

// loopbackHost reports whether a host (with or without port, IPv6 in
// brackets or not) is localhost or a loopback IP.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// ---- routing ----

// Surfaces, the label of agentd_http_requests_total.
const (
	surfaceREST    = "rest"
	surfaceRPC     = "rpc"
	surfaceWS      = "ws"
	surfaceSkills  = "skillcenter"
	surfaceHealth  = "health"
	surfaceMetrics = "metrics"
	surfaceDocs    = "docs"
	surfaceOther   = "other"
	surfaceUI      = "ui"
)

// Route scopes: what a request must hold to reach a handler.
const (
	scopeOpen = "open" // no authentication at all
	scopeAny  = "any"  // authenticated; the handler checks scopes per call
)

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

type routeOpts struct {
	surface string
	scope   string // ScopeRead, ScopeWrite, scopeAny, scopeOpen
	stream  bool   // no request timeout (WebSocket)
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	s.mux = mux
	add := func(pattern string, o routeOpts, h handlerFunc) {
		mux.Handle(pattern, s.wrap(o, h))
		s.patterns = append(s.patterns, pattern)
	}
	rest := func(scope string) routeOpts { return routeOpts{surface: surfaceREST, scope: scope} }
	add("GET /healthz", routeOpts{surface: surfaceHealth, scope: scopeOpen}, s.handleHealth)
	add("GET /readyz", routeOpts{surface: surfaceHealth, scope: scopeOpen}, s.handleReady)
	add("GET /metrics", routeOpts{surface: surfaceMetrics, scope: ScopeRead}, s.handleMetrics)
	add("GET /openapi.json", routeOpts{surface: surfaceDocs, scope: ScopeRead}, s.handleOpenAPI)
	add("GET /schemas/{kind}", routeOpts{surface: surfaceDocs, scope: ScopeRead}, s.handleSchema)

	add("POST /agents", rest(ScopeWrite), s.handleRegister)
	add("GET /agents", rest(ScopeRead), s.handleList)
	add("GET /agents/{id}", rest(ScopeRead), s.handleGet)
	add("GET /agents/{id}/card", rest(ScopeRead), s.handleCard)
	add("GET /.well-known/agent-card.json", routeOpts{surface: surfaceREST, scope: scopeOpen}, s.handleWellKnownCard)
	add("DELETE /agents/{id}", rest(ScopeWrite), s.handleUnregister)
	add("PUT /agents/{id}/status", rest(ScopeWrite), s.handleSetStatus)
	add("GET /capabilities", rest(ScopeRead), s.handleCapabilities)
	add("GET /peers", rest(ScopeRead), s.handlePeers)
	add("GET /explain", rest(ScopeRead), s.handleExplain)

	add("POST /rpc", routeOpts{surface: surfaceRPC, scope: scopeAny}, s.handleRPC)
	add("GET /ws", routeOpts{surface: surfaceWS, scope: ScopeRead, stream: true}, s.handleWS)

	add("GET /api/skills", routeOpts{surface: surfaceSkills, scope: ScopeRead}, s.handleSkills)
	add("GET /api/skills/{id}", routeOpts{surface: surfaceSkills, scope: ScopeRead}, s.handleSkill)
	add("POST /api/skills/search", routeOpts{surface: surfaceSkills, scope: ScopeRead}, s.handleSkillSearch)

	s.uiRoutes(mux)
	mux.Handle("/", s.wrap(routeOpts{surface: surfaceOther, scope: scopeOpen}, s.handleNoRoute))
	s.handler = http.HandlerFunc(s.serveHTTP)

	// MCP (streamable HTTP): authenticated as any route; each tool call
	// is then an in-process API request with the caller's token, which
	// checks its scope (mcp.go).
	mcpH := s.mcpHandler()
	for _, m := range []string{"POST", "GET", "DELETE"} {
		add(m+" /mcp", routeOpts{surface: surfaceMCP, scope: scopeAny, stream: true}, func(w http.ResponseWriter, r *http.Request) error {
			mcpH.ServeHTTP(w, r)
			return nil
		})
	}
}

// serveHTTP is the outermost layer: panic recovery, the request counter
// and the DNS-rebinding guard.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, surface: surfaceOther}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("API handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rec.wrote {
				writeError(rec, newError(http.StatusInternalServerError, record.CodeInternal, "", "internal error"))
			}
		}
		s.countRequest(rec.surface, rec.status)
	}()
	if s.loopback && !loopbackHost(r.Host) {
		s.m.Reject("api", CodeMisdirected)
		writeError(rec, newError(http.StatusMisdirectedRequest, CodeMisdirected, "Host",
			"this API serves loopback clients only; the Host header must be localhost or a loopback address"))
		return
	}
	wsTokenFromSubprotocol(r)
	s.mux.ServeHTTP(rec, r)
}

func (s *Server) countRequest(surface string, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	s.m.HTTPRequests.WithLabelValues(surface, strconv.Itoa(status)).Inc()
}

// wrap applies the per-route layers: authentication and scope, the
// request timeout, and the error writer.
func (s *Server) wrap(o routeOpts, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(*recorder); ok {
			rec.surface = o.surface
		}
		if s.isClosed() && o.scope != scopeOpen {
			writeError(w, errorOf(ErrClosed))
			return
		}
		acc, aerr := s.accessFor(r, o.scope)
		if aerr != nil {
			s.m.Reject("api", aerr.Code)
			writeError(w, aerr)
			return
		}
		ctx := withAccess(r.Context(), acc)
		if !o.stream {
			// net/http cancels a request's context when it reads EOF from
			// the client, and a client that half-closes its socket after
			// sending (shutdown(SHUT_WR), as `nc -N` and some proxies do)
			// sends EOF while it still waits for the answer. A bounded
			// request therefore runs to its own timeout, not the socket's
			// read side; a client that really went away costs at most
			// RequestTimeout of work. Streams keep the connection's context.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
			defer cancel()
		}
		if err := h(w, r.WithContext(ctx)); err != nil {
			e := errorOf(err)
			if e.Status >= 500 && e.Code == record.CodeInternal {
				s.log.Error("API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			} else if isReject(e.Code) {
				s.m.Reject("api", e.Code)
			}
			writeError(w, e)
		}
	})
}

// accessFor authenticates a request for a route of the given scope.
func (s *Server) accessFor(r *http.Request, scope string) (access, *Error) {
	if scope == scopeOpen {
		return openAccess, nil
	}
	if !s.authAll {
		// Open loopback: a valid token still identifies the client (registry
		// mode needs one); an invalid one is ignored.
		if s.auth != nil && r.Header.Get("Authorization") != "" {
			if acc, err := s.auth.authenticate(r); err == nil {
				acc.open = true
				return acc, nil
			}
		}
		return openAccess, nil
	}
	acc, err := s.auth.authenticate(r)
	if err != nil {
		return access{}, err
	}
	if scope != scopeAny && !acc.can(scope) {
		return access{}, scopeError(scope)
	}
	return acc, nil
}

type accessKey struct{}

func withAccess(ctx context.Context, a access) context.Context {
	return context.WithValue(ctx, accessKey{}, a)
}

func accessOf(ctx context.Context) access {
	a, _ := ctx.Value(accessKey{}).(access)
	return a
}

// requireScope checks a scope inside a handler (JSON-RPC methods,
// WebSocket frames).
func requireScope(ctx context.Context, scope string) *Error {
	if accessOf(ctx).can(scope) {
		return nil
	}
	return scopeError(scope)
}

// handleNoRoute answers 405 with Allow when the path exists under other
// methods, else 404.
func (s *Server) handleNoRoute(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		if containsStr(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		e := newError(http.StatusMethodNotAllowed, record.CodeMethodNotAllowed, "", "%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
		e.header = http.Header{"Allow": {strings.Join(allow, ", ")}}
		return e
	}
	return newError(http.StatusNotFound, record.CodeNotFound, "", "no such endpoint: %s %s", r.Method, truncate(r.URL.Path))
}

// ---- request helpers ----

// readBody reads a JSON request body: the Content-Type must be
// application/json (or +json), the size at most MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type",
			"the request body must be JSON with Content-Type: application/json (got %q)", truncate(ct))
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	b, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, badRequest("", "reading the request body failed: %v", err)
	}
	if len(b) == 0 {
		return nil, badRequest("", "the request body is empty")
	}
	return b, nil
}

// recorder remembers the status for the request counter and clears the
// deadlines net/http leaves on a hijacked connection (WebSocket sessions
// outlive the server's read and write timeouts).
type recorder struct {
	http.ResponseWriter
	surface  string
	status   int
	wrote    bool
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker for the WebSocket upgrade.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	r.hijacked = true
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	_ = c.SetDeadline(time.Time{})
	return c, brw, nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// isReject reports whether an error code is an input the API refused (the
// agentd_validation_rejects_total counter), as opposed to an answer such
// as "not found".
func isReject(code string) bool {
	switch code {
	case record.CodeMalformedPayload, record.CodeAuth, record.CodeForbidden, record.CodeDuplicateID,
		record.CodeUnsupportedVersion, record.CodeRequestTooLarge, CodeUnsupportedMediaType, CodeMisdirected:
		return true
	}
	return false
}

func truncate(s string) string { return record.Truncate(s, 64) }
