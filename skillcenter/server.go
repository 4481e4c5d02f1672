package skillcenter

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// Pagination of the mirror's lists.
const (
	// DefaultPageSize is the number of skills a list or search answers
	// when no limit is given; MaxPageSize is the largest limit.
	DefaultPageSize = 1000
	MaxPageSize     = 1000
)

// ServerOptions configure a mirror Server. Zero values take the defaults.
type ServerOptions struct {
	// PublicURL is the base URL clients reach the mirror at, used for
	// downloadUrl ("" derives it from each request: http or https, and its
	// Host header).
	PublicURL string
	// JWTSecret (HS256, at least 32 bytes) and/or JWTPublicKeyPEM (ES256)
	// turn the seed-000 registry on: POST /agents (discover:write),
	// GET /agents and GET /agents/{id} (discover:read). Without either
	// those paths answer 404.
	JWTSecret       string
	JWTPublicKeyPEM []byte
	// Verifier checks registered records (default: policy open over
	// in-memory key pins).
	Verifier *trust.Verifier
	// RegistrationLease is how long a registration lives without a new
	// POST (default 30 s); MaxRegistrations bounds them (default 10000).
	RegistrationLease time.Duration
	MaxRegistrations  int
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// Logger receives the server's logs (default: discarded).
	Logger *slog.Logger
}

// Server serves the SkillCenter API of seed 001 §7 from a Catalog — GET
// /api/skills, GET /api/skills/{id}, POST /api/skills/search, GET
// /api/skills/{id}/download — plus, when configured, a seed-000 registry
// (POST/GET /agents) whose agents' skills join the catalog's answers. Its
// JSON GET answers carry a strong ETag and honour If-None-Match. It starts
// no goroutine; Handler is safe for concurrent use and SetCatalog swaps
// the catalog atomically.
type Server struct {
	o    ServerOptions
	cat  atomic.Pointer[Catalog]
	auth *authenticator
	reg  *registry
	mux  *http.ServeMux
	log  *slog.Logger
}

// NewServer builds a mirror over cat.
func NewServer(cat *Catalog, o ServerOptions) (*Server, error) {
	if cat == nil {
		return nil, errors.New("skillcenter: a catalog is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RegistrationLease <= 0 {
		o.RegistrationLease = DefaultRegistrationLease
	}
	if o.MaxRegistrations <= 0 {
		o.MaxRegistrations = DefaultMaxRegistrations
	}
	if o.PublicURL != "" {
		u, err := url.Parse(o.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("skillcenter: public URL %q must be http:// or https:// with a host", o.PublicURL)
		}
		o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	}
	s := &Server{o: o, log: o.Logger}
	s.cat.Store(cat)
	auth, err := newAuthenticator(o.JWTSecret, o.JWTPublicKeyPEM, o.Now)
	if err != nil {
		return nil, err
	}
	if auth != nil {
		ver := o.Verifier
		if ver == nil {
			ver, err = trust.NewVerifier(trust.Config{Policy: trust.PolicyOpen, Now: o.Now}, trust.NewMemPins())
			if err != nil {
				return nil, err
			}
		}
		s.auth = auth
		s.reg = newRegistry(ver, o.RegistrationLease, o.MaxRegistrations, o.Now)
	}
	s.routes()
	return s, nil
}

// Catalog returns the catalog being served.
func (s *Server) Catalog() *Catalog { return s.cat.Load() }

// SetCatalog serves c from now on.
func (s *Server) SetCatalog(c *Catalog) {
	if c != nil {
		s.cat.Store(c)
	}
}

// Reload loads the catalog's directory again and serves it; on error the
// current catalog stays.
func (s *Server) Reload() error {
	c, err := LoadCatalog(s.Catalog().Dir())
	if err != nil {
		return err
	}
	s.SetCatalog(c)
	return nil
}

// Registered returns the number of live registrations (0 when the
// registry is off).
func (s *Server) Registered() int {
	if s.reg == nil {
		return 0
	}
	return s.reg.len()
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /api/skills", s.wrap(s.handleList))
	s.mux.HandleFunc("GET /api/skills/{id}", s.wrap(s.handleGet))
	s.mux.HandleFunc("POST /api/skills/search", s.wrap(s.handleSearch))
	s.mux.HandleFunc("GET /api/skills/{id}/download", s.wrap(s.handleDownload))
	s.mux.HandleFunc("POST /agents", s.wrap(s.handleRegister))
	s.mux.HandleFunc("GET /agents", s.wrap(s.handleAgents))
	s.mux.HandleFunc("GET /agents/{id}", s.wrap(s.handleAgent))
	s.mux.HandleFunc("GET /healthz", s.wrap(s.handleHealth))
	s.mux.HandleFunc("/", s.wrap(s.handleFallback))
}

// wrap turns handler errors into the JSON error body and recovers panics.
func (s *Server) wrap(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("skillcenter handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeAPIError(w, newAPIError(http.StatusInternalServerError, record.CodeInternal, "", "internal error"))
			}
		}()
		if err := h(w, r); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = s.classify(err)
			}
			s.log.Debug("skillcenter request refused", "method", r.Method, "path", r.URL.Path, "status", ae.Status, "code", ae.Code, "err", ae.Message)
			writeAPIError(w, ae)
		}
	}
}

func (s *Server) classify(err error) *apiError {
	var re *trust.RejectError
	var fe *record.FieldError
	switch {
	case errors.As(err, &re):
		return rejectAPIError(re)
	case errors.Is(err, ErrOlderRecord):
		return newAPIError(http.StatusConflict, record.CodeDuplicateID, "agent.seq", "%v", err)
	case errors.Is(err, ErrRegistryFull):
		return newAPIError(http.StatusServiceUnavailable, record.CodeServiceUnavailable, "", "%v", err)
	case errors.Is(err, record.ErrUnsupportedVersion):
		return newAPIError(http.StatusBadRequest, record.CodeUnsupportedVersion, "protocol_version", "%v", err)
	case errors.Is(err, record.ErrTooLarge):
		return newAPIError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, record.FieldOf(err), "%v", err)
	case errors.As(err, &fe):
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, fe.Field, "%s", fe.Reason)
	}
	s.log.Error("skillcenter request failed", "err", err)
	return newAPIError(http.StatusInternalServerError, record.CodeInternal, "", "internal error")
}

func rejectAPIError(re *trust.RejectError) *apiError {
	msg := re.Error()
	switch re.Reason {
	case trust.ReasonNotAllowlisted:
		return newAPIError(http.StatusForbidden, record.CodeForbidden, "agent.agent_id", "%s", msg)
	case trust.ReasonRevoked, trust.ReasonUnknownIssuer, trust.ReasonNoCertificate, trust.ReasonBadCertificate, trust.ReasonKeyRetired:
		return newAPIError(http.StatusForbidden, record.CodeForbidden, "agent.certificate", "%s", msg)
	case trust.ReasonKeyMismatch, trust.ReasonReplay:
		return newAPIError(http.StatusConflict, record.CodeDuplicateID, "agent.agent_id", "%s", msg)
	case trust.ReasonUnsigned, trust.ReasonBadSignature:
		if strings.Contains(re.Detail, "peer_signature") || strings.Contains(re.Detail, "peer signature") {
			return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "peer_signature", "%s", msg)
		}
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "signature", "%s", msg)
	case trust.ReasonBadPeerSignature:
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "peer_signature", "%s", msg)
	case trust.ReasonExpired, trust.ReasonNotYetValid:
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "agent.issued_at", "%s", msg)
	}
	return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, re.Field, "%s", msg)
}

// ---- catalog endpoints ----

// baseURL is the URL clients reach the server at.
func (s *Server) baseURL(r *http.Request) string {
	if s.o.PublicURL != "" {
		return s.o.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// skillOf is a catalog entry in the §7.3 shape.
func (s *Server) skillOf(r *http.Request, e *Entry) Skill {
	sk := e.skill
	s.withDownloadURL(r, &sk)
	return sk
}

// withDownloadURL sets the downloadUrl of a catalog skill with a package.
func (s *Server) withDownloadURL(r *http.Request, sk *Skill) {
	if sk.Package != nil && sk.Source == "" {
		sk.DownloadURL = s.baseURL(r) + "/api/skills/" + url.PathEscape(sk.ID) + "/download"
	}
}

// allSkills is every skill the server answers with, by id: the catalog's,
// then for the other ids those of live registrations. The catalog's
// entries share their slices with the catalog (read only) and have no
// downloadUrl yet (withPage sets it on the page answered).
func (s *Server) allSkills() []Skill {
	cat := s.Catalog()
	out := make([]Skill, 0, cat.Len())
	for _, e := range cat.entries {
		out = append(out, e.skill)
	}
	if s.reg != nil {
		for id, sk := range registeredSkills(s.reg.live()) {
			if _, ok := cat.Get(id); !ok {
				out = append(out, sk)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	}
	return out
}

// withPage cuts a page and sets its download URLs.
func (s *Server) withPage(r *http.Request, all []Skill, offset, limit int) []Skill {
	p := page(all, offset, limit)
	for i := range p {
		s.withDownloadURL(r, &p[i])
	}
	return p
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", DefaultPageSize, 1, MaxPageSize)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, MaxCatalogSkills+DefaultMaxRegistrations)
	if err != nil {
		return err
	}
	all := s.allSkills()
	writeCachedJSON(w, r, SkillList{Total: len(all), Skills: s.withPage(r, all, offset, limit)})
	return nil
}

func page(all []Skill, offset, limit int) []Skill {
	if offset >= len(all) {
		return []Skill{}
	}
	return all[offset:min(len(all), offset+limit)]
}

func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	vs := q[name]
	switch len(vs) {
	case 0:
		return def, nil
	case 1:
	default:
		return 0, newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, name, "is given %d times", len(vs))
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < lo || n > hi {
		return 0, newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, name, "must be an integer from %d to %d", lo, hi)
	}
	return n, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !ValidID(id) {
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "id", "%q is not a skill id", trunc(id))
	}
	if e, ok := s.Catalog().Get(id); ok {
		sk := s.skillOf(r, e)
		sk.Manifest = e.Manifest.Canonical()
		writeCachedJSON(w, r, sk)
		return nil
	}
	if s.reg != nil {
		if sk, ok := registeredSkills(s.reg.live())[id]; ok {
			writeCachedJSON(w, r, sk)
			return nil
		}
	}
	return newAPIError(http.StatusNotFound, record.CodeNoSkillsFound, "id", "no skill %q in this catalog", id)
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, MaxSearchBytes)
	if err != nil {
		return err
	}
	req, err := DecodeSearchRequest(body)
	if err != nil {
		return err
	}
	q, err := compileSearch(req)
	if err != nil {
		return err
	}
	limit := req.Limit
	if limit == 0 || limit > MaxPageSize {
		limit = min(max(limit, DefaultPageSize), MaxPageSize)
	}
	var hits []Skill
	for _, sk := range s.allSkills() {
		if q.matches(sk) {
			hits = append(hits, sk)
		}
	}
	writeJSON(w, http.StatusOK, SkillList{Total: len(hits), Skills: s.withPage(r, hits, req.Offset, limit)})
	return nil
}

// DecodeSearchRequest decodes a §7.2 request strictly: a JSON object
// (I-JSON), member names matched exactly, unknown members ignored (as a
// SkillCenter does), wrong types naming the member; then Validate.
func DecodeSearchRequest(b []byte) (SearchRequest, error) {
	var req SearchRequest
	if len(b) > MaxSearchBytes {
		return req, newAPIError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, "", "a search is at most %d bytes", MaxSearchBytes)
	}
	canon, err := record.CanonicalizeJSON(b)
	if err != nil {
		return req, fieldErr("", "the body is not I-JSON: %s", innerReason(err))
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(canon, &m) != nil || m == nil {
		return req, fieldErr("", "the body must be a JSON object (seed 001 §7.2)")
	}
	fields := []struct {
		name string
		dst  any
	}{
		{"capabilities", &req.Capabilities}, {"scenes", &req.Scenes}, {"types", &req.Types},
		{"keywords", &req.Keywords}, {"version", &req.Version}, {"limit", &req.Limit}, {"offset", &req.Offset},
	}
	for _, f := range fields {
		raw, ok := m[f.name]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return SearchRequest{}, fieldErr(f.name, "has the wrong type: %v", jsonErr(err).(*record.FieldError).Reason)
		}
	}
	for _, l := range []*[]string{&req.Capabilities, &req.Scenes, &req.Types, &req.Keywords} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return req, req.Validate()
}

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !ValidID(id) {
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "id", "%q is not a skill id", trunc(id))
	}
	e, ok := s.Catalog().Get(id)
	if !ok {
		return newAPIError(http.StatusNotFound, record.CodeNoSkillsFound, "id", "no skill %q in this catalog", id)
	}
	p := e.Manifest.Package
	if p == nil {
		return newAPIError(http.StatusNotFound, record.CodeNotFound, "id", "skill %q has no package", id)
	}
	f, err := os.Open(e.PackagePath)
	if err != nil {
		return fmt.Errorf("open package of %s: %w", id, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat package of %s: %w", id, err)
	}
	if fi.Size() != p.Size {
		// The file changed since the catalog was loaded: serving it
		// would break the digest promise.
		s.log.Error("package changed since the catalog was loaded; reload the catalog", "skill", id, "file", e.PackagePath)
		return newAPIError(http.StatusServiceUnavailable, record.CodeServiceUnavailable, "", "the package of %q changed on the server; try again later", id)
	}
	raw, _ := hex.DecodeString(p.SHA256)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", `"`+p.SHA256+`"`)
	h.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(raw)+":")
	h.Set("X-Checksum-Sha256", p.SHA256)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": p.File}))
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, p.File, e.ModTime, f)
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) error {
	cat := s.Catalog()
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "ok", "skills": cat.Len(), "catalog_loaded_at": cat.LoadedAt().UTC().Format(time.RFC3339),
		"registry": s.reg != nil, "registered": s.Registered(),
	})
	return nil
}

// handleFallback answers unknown paths (404) and known paths with another
// method (405 with Allow).
func (s *Server) handleFallback(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pat := s.mux.Handler(r2); pat != "/" && pat != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		if slices.Contains(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		e := newAPIError(http.StatusMethodNotAllowed, record.CodeMethodNotAllowed, "", "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))
		e.header = http.Header{"Allow": {strings.Join(allow, ", ")}}
		return e
	}
	return newAPIError(http.StatusNotFound, record.CodeNotFound, "", "no such path: %s", trunc(r.URL.Path))
}

// ---- registry endpoints ----

// AgentEntry is one registration in the answer of GET /agents: the
// seed-000 Announce plus source, age and stale, as agentd's API answers.
type AgentEntry struct {
	ProtocolVersion string          `json:"protocol_version"`
	Agent           json.RawMessage `json:"agent"`
	Signature       string          `json:"signature,omitempty"`
	PeerSignature   string          `json:"peer_signature,omitempty"`
	Source          string          `json:"source"`
	AgeMS           int64           `json:"age_ms"`
	Stale           bool            `json:"stale"`
	// ExpiresAt is when the registration ends unless posted again.
	ExpiresAt string `json:"expires_at"`
}

// AgentList is the answer of GET /agents.
type AgentList struct {
	Agents []AgentEntry `json:"agents"`
	Total  int          `json:"total"`
}

func (s *Server) entryOf(reg registration) AgentEntry {
	a := reg.sa.Announce()
	return AgentEntry{ProtocolVersion: a.ProtocolVersion, Agent: a.Agent, Signature: a.Signature, PeerSignature: a.PeerSignature,
		Source: "registry", AgeMS: max(s.o.Now().Sub(reg.received), 0).Milliseconds(),
		ExpiresAt: reg.expires.UTC().Format(record.IssuedAtLayout)}
}

func (s *Server) registryOff() error {
	return newAPIError(http.StatusNotFound, record.CodeNotFound, "", "this mirror does not accept registrations (serve it with a JWT secret or public key)")
}

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) error {
	if s.reg == nil {
		return s.registryOff()
	}
	if ae := s.auth.check(r, ScopeWrite); ae != nil {
		return ae
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return newAPIError(http.StatusUnsupportedMediaType, record.CodeMalformedPayload, "Content-Type", "must be application/json")
	}
	body, err := readBody(w, r, record.MaxMessageBytes)
	if err != nil {
		return err
	}
	sa, newer, err := record.ParseAnnounce(body)
	if err != nil {
		return err
	}
	if newer {
		s.log.Warn("registration speaks a newer minor protocol version; continuing with ours", "version", sa.ProtocolVersion, "supported", record.ProtocolVersion)
	}
	if len(sa.Signature) == 0 {
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "signature", "a registration must be a signed Announce")
	}
	if err := s.reg.put(sa); err != nil {
		return err
	}
	reg, ok := s.reg.get(sa.Agent.AgentID)
	if !ok {
		// Its lease already ended (a record expiring now).
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "agent.issued_at", "the record expires now")
	}
	s.log.Debug("agent registered", "agent_id", sa.Agent.AgentID, "seq", sa.Agent.Seq, "expires", reg.expires)
	w.Header().Set("Location", "/agents/"+sa.Agent.AgentID)
	writeJSON(w, http.StatusOK, s.entryOf(reg))
	return nil
}

func (s *Server) handleAgents(w http.ResponseWriter, r *http.Request) error {
	if s.reg == nil {
		return s.registryOff()
	}
	if ae := s.auth.check(r, ScopeRead); ae != nil {
		return ae
	}
	q := r.URL.Query()
	capability := q.Get("capability")
	if capability != "" && !record.ValidIdent(capability) {
		return newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "capability", "%q is not an identifier", trunc(capability))
	}
	out := AgentList{Agents: []AgentEntry{}}
	for _, reg := range s.reg.live() {
		if capability == "" || reg.sa.Agent.Offers("", capability) {
			out.Agents = append(out.Agents, s.entryOf(reg))
		}
	}
	out.Total = len(out.Agents)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleAgent(w http.ResponseWriter, r *http.Request) error {
	if s.reg == nil {
		return s.registryOff()
	}
	if ae := s.auth.check(r, ScopeRead); ae != nil {
		return ae
	}
	id := r.PathValue("id")
	reg, ok := s.reg.get(id)
	if !ok {
		return newAPIError(http.StatusNotFound, record.CodeNoSkillsFound, "agent_id", "agent %q is not registered", trunc(id))
	}
	writeJSON(w, http.StatusOK, s.entryOf(reg))
	return nil
}

// ---- HTTP helpers ----

// apiError is an error answer: {"error":code,"message":…,"field":…}, the
// body agentd's API answers with.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	header  http.Header
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newAPIError(status int, code, field, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	for k, vs := range e.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"ErrInternal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeCachedJSON writes a GET answer with a strong ETag (the first 16
// bytes of the body's SHA-256), answering 304 when If-None-Match names it.
func writeCachedJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, newAPIError(http.StatusInternalServerError, record.CodeInternal, "", "internal error"))
		return
	}
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "no-cache")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// etagMatches applies If-None-Match (RFC 9110 §13.1.2, weak comparison).
func etagMatches(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// readBody reads a bounded request body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newAPIError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, "", "the body is larger than %d bytes", limit)
		}
		return nil, newAPIError(http.StatusBadRequest, record.CodeMalformedPayload, "", "reading the body failed: %v", err)
	}
	return b, nil
}
