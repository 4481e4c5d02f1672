package skillcenter

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/record"
)

// Defaults of Options (seed 001 §13.2 for the timeout and the cache TTL).
const (
	DefaultTimeout         = 10 * time.Second
	DefaultRetries         = 2
	DefaultBackoff         = 200 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 30 * time.Second
	DefaultCacheTTL        = 300 * time.Second
	DefaultStaleFor        = time.Hour
	DefaultCacheEntries    = 1000
)

// maxListPages bounds the pages List follows.
const maxListPages = 100

// CatalogHeader is sent ("1") with every catalog request of the client, so
// that an agentd answering the SkillCenter endpoints can tell a request
// from another resolver and answer it from its own view only: two agentd
// that name each other (or themselves) as catalog would otherwise ask each
// other in a loop until the timeout.
const CatalogHeader = "X-Agentd-Catalog"

// Options configure a Client. Zero values take the defaults above.
type Options struct {
	// Timeout bounds one HTTP attempt: the whole exchange for JSON
	// answers, until the response headers for downloads (default 10 s).
	Timeout time.Duration
	// Retries is how many times a failed attempt (transport error,
	// timeout, 5xx, 429) is retried (default 2; negative: none).
	Retries int
	// Backoff is the delay before the first retry (default 200 ms); it
	// doubles with each retry, ±25 % jitter, at most MaxBackoff (default
	// 5 s). A Retry-After of the server is honoured up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// BreakerFailures failed attempts in a row open the circuit (default
	// 5): calls then fail at once with ErrCircuitOpen for BreakerCooldown
	// (default 30 s), after which one probe is let through.
	BreakerFailures int
	BreakerCooldown time.Duration
	// CacheTTL is how long an answer is served from the cache without
	// asking the catalog (default 300 s); negative turns the cache, and
	// stale answers, off.
	CacheTTL time.Duration
	// StaleFor is how long an expired answer is kept to be served, marked
	// stale, when the catalog cannot be asked (default 1 h).
	StaleFor time.Duration
	// CacheEntries bounds the cached answers (default 1000).
	CacheEntries int
	// MaxResponseBytes bounds a JSON answer (default MaxResponseBytes).
	MaxResponseBytes int64
	// Token, when set, is sent as a bearer token.
	Token string
	// HTTPClient sends the requests (default: a client of its own, whose
	// idle connections Close releases).
	HTTPClient *http.Client
	// UserAgent is sent with every request (default "agentd-skillcenter").
	UserAgent string
	// Now returns the current time for the cache and the breaker (default
	// time.Now).
	Now func() time.Time
	// Logger receives the client's logs (default: discarded).
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	} else if o.Retries < 0 {
		o.Retries = 0
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.StaleFor == 0 {
		o.StaleFor = DefaultStaleFor
	}
	if o.CacheEntries == 0 {
		o.CacheEntries = DefaultCacheEntries
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = MaxResponseBytes
	}
	if o.UserAgent == "" {
		o.UserAgent = "agentd-skillcenter"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Timeout < 0:
		return errors.New("skillcenter: Timeout must not be negative")
	case o.Backoff < 0 || o.MaxBackoff < 0:
		return errors.New("skillcenter: Backoff and MaxBackoff must not be negative")
	case o.BreakerFailures < 1:
		return errors.New("skillcenter: BreakerFailures must be at least 1")
	case o.BreakerCooldown < 0:
		return errors.New("skillcenter: BreakerCooldown must not be negative")
	case o.StaleFor < 0:
		return errors.New("skillcenter: StaleFor must not be negative")
	case o.CacheEntries < 1:
		return errors.New("skillcenter: CacheEntries must be at least 1")
	case o.MaxResponseBytes < 1:
		return errors.New("skillcenter: MaxResponseBytes must be positive")
	case strings.ContainsAny(o.Token, " \t\r\n"):
		return errors.New("skillcenter: the token must not contain whitespace")
	}
	return nil
}

// Client is a client of a SkillCenter API (seed 001 §7): a seed-001
// SkillCenter, the agentd mirror (agentd skillcenter serve) or an agentd
// API. Answers are cached by request for CacheTTL; when the catalog
// cannot be asked (after retries, or while the circuit is open) an expired
// answer is returned marked stale. It is safe for concurrent use; Close
// releases its idle connections.
type Client struct {
	base  *url.URL
	o     Options
	hc    *http.Client
	ownHC bool
	br    *breaker
	cache *answerCache
	log   *slog.Logger

	mu     sync.Mutex
	closed bool
}

// NewClient returns a client of the catalog at baseURL, an http or https
// URL (a path prefix is kept: https://host/prefix/api/skills).
func NewClient(baseURL string, o Options) (*Client, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("skillcenter: catalog URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("skillcenter: catalog URL %q must be http:// or https:// with a host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("skillcenter: catalog URL %q must not have a query, fragment or user info", baseURL)
	}
	c := &Client{base: u, o: o, hc: o.HTTPClient, br: newBreaker(o.BreakerFailures, o.BreakerCooldown),
		cache: newAnswerCache(o.CacheTTL, o.StaleFor, o.CacheEntries), log: o.Logger}
	if c.hc == nil {
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		c.ownHC = true
	}
	return c, nil
}

// URL returns the catalog's base URL.
func (c *Client) URL() string { return c.base.String() }

// Close releases the client's idle connections. Calls after Close fail
// with ErrClosed. It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// State describes the client for health reports.
type State struct {
	// Circuit is "closed", "open" or "half-open".
	Circuit string `json:"circuit"`
	// Failures is the number of consecutive failed attempts.
	Failures int `json:"failures"`
	// Cached is the number of cached answers.
	Cached int `json:"cached"`
}

// State returns the breaker state and the cache size.
func (c *Client) State() State {
	st, f := c.br.snapshot()
	return State{Circuit: st, Failures: f, Cached: c.cache.len()}
}

// Answer is a catalog answer and how fresh it is.
type Answer[T any] struct {
	Value T
	// FetchedAt is when the catalog gave (or confirmed) the answer.
	FetchedAt time.Time
	// Cached says the answer came from the cache without asking the
	// catalog (it is younger than CacheTTL).
	Cached bool
	// Stale says the catalog could not be asked and the answer is an
	// expired cache entry; Cause says why the catalog could not be asked.
	Stale bool
	Cause error
}

// List returns every skill of the catalog (GET /api/skills, following the
// mirror's pages while total exceeds what was received).
func (c *Client) List(ctx context.Context) (Answer[SkillList], error) {
	return c.cachedList(ctx, "GET /api/skills", func(ctx context.Context, etag string) (SkillList, string, bool, error) {
		r, err := c.call(ctx, http.MethodGet, "/api/skills", nil, nil, etag)
		if err != nil || r.notModified {
			return SkillList{}, "", r.notModified, err
		}
		l, err := DecodeSkillList(r.body)
		if err != nil {
			return SkillList{}, "", false, fmt.Errorf("decode GET /api/skills: %w", err)
		}
		for page := 1; page < maxListPages && len(l.Skills) < l.Total && len(l.Skills) < MaxCachedSkills; page++ {
			q := url.Values{"offset": {strconv.Itoa(len(l.Skills))}}
			r2, err := c.call(ctx, http.MethodGet, "/api/skills", q, nil, "")
			if err != nil {
				return SkillList{}, "", false, err
			}
			more, err := DecodeSkillList(r2.body)
			if err != nil {
				return SkillList{}, "", false, fmt.Errorf("decode GET /api/skills?offset=%d: %w", len(l.Skills), err)
			}
			if len(more.Skills) == 0 {
				break
			}
			l.Skills = append(l.Skills, more.Skills...)
		}
		return l, r.etag, false, nil
	})
}

// Get returns one skill (GET /api/skills/{id}). An unknown id is an
// *HTTPError with Status 404 (IsNotFound), never a stale answer.
func (c *Client) Get(ctx context.Context, id string) (Answer[Skill], error) {
	if id == "" || len(id) > 1024 || !record.Printable(id) {
		return Answer[Skill]{}, fieldErr("id", "must be 1-1024 printable bytes")
	}
	path := "/api/skills/" + url.PathEscape(id)
	a, err := c.cachedList(ctx, "GET "+path, func(ctx context.Context, etag string) (SkillList, string, bool, error) {
		r, err := c.call(ctx, http.MethodGet, path, nil, nil, etag)
		if err != nil || r.notModified {
			return SkillList{}, "", r.notModified, err
		}
		s, err := DecodeSkill(r.body)
		if err != nil {
			return SkillList{}, "", false, fmt.Errorf("decode GET %s: %w", path, err)
		}
		return SkillList{Total: 1, Skills: []Skill{s}}, r.etag, false, nil
	})
	out := Answer[Skill]{FetchedAt: a.FetchedAt, Cached: a.Cached, Stale: a.Stale, Cause: a.Cause}
	if err != nil {
		return out, err
	}
	out.Value = a.Value.Skills[0]
	return out, nil
}

// Search asks POST /api/skills/search (seed 001 §7.2) and returns the §7.3
// answer.
func (c *Client) Search(ctx context.Context, req SearchRequest) (Answer[SkillList], error) {
	if err := req.Validate(); err != nil {
		return Answer[SkillList]{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Answer[SkillList]{}, err
	}
	return c.cachedList(ctx, "POST /api/skills/search "+string(body), func(ctx context.Context, _ string) (SkillList, string, bool, error) {
		r, err := c.call(ctx, http.MethodPost, "/api/skills/search", nil, body, "")
		if err != nil {
			return SkillList{}, "", false, err
		}
		l, err := DecodeSkillList(r.body)
		if err != nil {
			return SkillList{}, "", false, fmt.Errorf("decode POST /api/skills/search: %w", err)
		}
		return l, "", false, nil
	})
}

// fetchFunc asks the catalog; etag is the cached entry's ETag for a
// conditional request; notModified reports a 304.
type fetchFunc func(ctx context.Context, ifNoneMatch string) (l SkillList, etag string, notModified bool, err error)

// cachedList serves key from the cache while fresh, else asks the catalog
// and caches the answer; when the catalog cannot be asked it serves the
// expired entry marked stale.
func (c *Client) cachedList(ctx context.Context, key string, fetch fetchFunc) (Answer[SkillList], error) {
	if c.isClosed() {
		return Answer[SkillList]{}, ErrClosed
	}
	now := c.o.Now()
	e, fresh, ok := c.cache.get(key, now)
	if ok && fresh {
		return Answer[SkillList]{Value: e.list, FetchedAt: e.fetched, Cached: true}, nil
	}
	l, etag, notModified, err := fetch(ctx, e.etag)
	now = c.o.Now()
	switch {
	case err == nil && notModified && ok:
		c.cache.touch(key, now)
		return Answer[SkillList]{Value: e.list, FetchedAt: now}, nil
	case err == nil && notModified:
		// A 304 without a cached entry (the entry was evicted between
		// the read and the answer): ask again unconditionally.
		l, etag, _, err = fetch(ctx, "")
	}
	if err == nil {
		c.cache.put(key, cacheEntry{list: l, etag: etag, fetched: now})
		return Answer[SkillList]{Value: l, FetchedAt: now}, nil
	}
	if IsNotFound(err) {
		c.cache.delete(key)
		return Answer[SkillList]{}, err
	}
	if ok && unreachable(err) {
		c.log.Debug("skillcenter unavailable; serving a stale answer", "request", key, "age", now.Sub(e.fetched), "err", err)
		return Answer[SkillList]{Value: e.list, FetchedAt: e.fetched, Stale: true, Cause: err}, nil
	}
	return Answer[SkillList]{}, err
}

// response is a successful exchange.
type response struct {
	status      int
	header      http.Header
	body        []byte
	etag        string
	notModified bool
}

// call sends one request with retries and the breaker, and reads a JSON
// answer. Error statuses are *HTTPError.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, body []byte, etag string) (response, error) {
	var out response
	err := c.withRetries(ctx, method+" "+path, func(actx context.Context) (outcome, error) {
		req, err := c.newRequest(actx, method, path, q, body)
		if err != nil {
			return outcomeNeutral, err
		}
		req.Header.Set("Accept", "application/json")
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return outcomeFailure, err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(io.LimitReader(resp.Body, c.o.MaxResponseBytes+1))
		if err != nil {
			return outcomeFailure, fmt.Errorf("read the answer: %w", err)
		}
		if int64(len(b)) > c.o.MaxResponseBytes {
			return outcomeSuccess, fmt.Errorf("%w: the answer to %s %s exceeds %d bytes", ErrResponseTooLarge, method, path, c.o.MaxResponseBytes)
		}
		switch {
		case resp.StatusCode == http.StatusNotModified && etag != "":
			out = response{status: resp.StatusCode, header: resp.Header, notModified: true}
			return outcomeSuccess, nil
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			out = response{status: resp.StatusCode, header: resp.Header, body: b, etag: resp.Header.Get("ETag")}
			return outcomeSuccess, nil
		}
		he := httpErrorOf(resp, b)
		if unreachable(he) {
			return outcomeFailure, he
		}
		return outcomeSuccess, he
	})
	return out, err
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	// path is already escaped; the base URL has no query or fragment.
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", c.o.UserAgent)
	req.Header.Set(CatalogHeader, "1")
	if c.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.o.Token)
	}
	return req, nil
}

// withRetries runs attempt under the breaker, retrying failures with
// backoff. Each attempt gets a context bounded by Timeout.
func (c *Client) withRetries(ctx context.Context, what string, attempt func(context.Context) (outcome, error)) error {
	var last error
	for i := 0; ; i++ {
		if c.isClosed() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return fmt.Errorf("%s: %w (last attempt: %w)", what, err, last)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		if !c.br.allow(c.o.Now()) {
			if last != nil {
				return fmt.Errorf("%s: %w (last attempt: %w)", what, ErrCircuitOpen, last)
			}
			return fmt.Errorf("%s: %w", what, ErrCircuitOpen)
		}
		actx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		o, err := attempt(actx)
		cancel()
		if o == outcomeFailure && ctx.Err() != nil {
			o = outcomeNeutral // the caller gave up; not the catalog's fault
		}
		if c.br.done(c.o.Now(), o) {
			c.log.Warn("skillcenter circuit opened", "url", c.base.String(), "cooldown", c.o.BreakerCooldown, "err", err)
		}
		if err == nil || o != outcomeFailure {
			return err
		}
		last = err
		if i >= c.o.Retries {
			return fmt.Errorf("%s: %w", what, err)
		}
		wait := c.backoff(i)
		var he *HTTPError
		if errors.As(err, &he) && he.RetryAfter > 0 {
			wait = min(he.RetryAfter, c.o.MaxBackoff)
		}
		c.log.Debug("skillcenter attempt failed; retrying", "request", what, "attempt", i+1, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// backoff is the delay before retry i+1: Backoff·2^i ±25 %, at most
// MaxBackoff.
func (c *Client) backoff(i int) time.Duration {
	return backoff.Delay(c.o.Backoff, c.o.MaxBackoff, i, 0.25)
}

// httpErrorOf reads an error answer: an agentd error body when it is one.
func httpErrorOf(resp *http.Response, b []byte) *HTTPError {
	he := &HTTPError{Status: resp.StatusCode}
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		Field   string `json:"field"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Error != "" || body.Message != "") {
		he.Code, he.Message, he.Field = clip(body.Error, 64), clip(body.Message, 512), clip(body.Field, 128)
	} else {
		he.Message = clip(strings.TrimSpace(string(b)), 200)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			he.RetryAfter = time.Duration(min(s, 86400)) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			he.RetryAfter = max(time.Until(t), 0)
		}
	}
	return he
}

// clip bounds a string from the network and drops what is not printable.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	return trunc2(s, n)
}

func trunc2(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xc0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Download is a package being downloaded: Body streams it (close it).
type Download struct {
	Body io.ReadCloser
	// Size is the Content-Length, or -1 when unknown.
	Size int64
	// SHA256 is the lowercase hex digest the server announced (the
	// sha-256 of Content-Digest, RFC 9530, or X-Checksum-Sha256), "" when
	// it announced none.
	SHA256 string
	// ETag is the server's ETag.
	ETag string
}

// Download starts GET /api/skills/{id}/download. Timeout bounds the wait
// for the response headers; the body streams under ctx. Retries and the
// breaker apply until the headers arrive.
func (c *Client) Download(ctx context.Context, id string) (*Download, error) {
	if !ValidID(id) {
		return nil, fieldErr("id", "%q is not a catalog skill id", trunc(id))
	}
	path := "/api/skills/" + url.PathEscape(id) + "/download"
	var out *Download
	err := c.withRetries(ctx, "GET "+path, func(context.Context) (outcome, error) {
		// The body outlives the attempt: a context of its own, cancelled
		// by a timer until the headers arrive and by Close afterwards.
		bctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(c.o.Timeout, cancel)
		req, err := c.newRequest(bctx, http.MethodGet, path, nil, nil)
		if err != nil {
			cancel()
			return outcomeNeutral, err
		}
		resp, err := c.hc.Do(req)
		if !timer.Stop() && err == nil {
			_ = resp.Body.Close()
			err = fmt.Errorf("no answer within %s", c.o.Timeout)
		}
		if err != nil {
			cancel()
			return outcomeFailure, err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			cancel()
			he := httpErrorOf(resp, b)
			if unreachable(he) {
				return outcomeFailure, he
			}
			return outcomeSuccess, he
		}
		d := &Download{Body: cancelOnClose{resp.Body, cancel}, Size: resp.ContentLength, ETag: resp.Header.Get("ETag")}
		d.SHA256, err = announcedDigest(resp.Header)
		if err != nil {
			_ = d.Body.Close()
			return outcomeSuccess, err
		}
		out = d
		return outcomeSuccess, nil
	})
	return out, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// announcedDigest reads the SHA-256 a download announces: Content-Digest
// (RFC 9530, "sha-256=:base64:") or X-Checksum-Sha256 (hex). Two that
// disagree are an error.
func announcedDigest(h http.Header) (string, error) {
	var got []string
	for _, v := range h.Values("Content-Digest") {
		for _, part := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "sha-256") {
				continue
			}
			val = strings.TrimSpace(val)
			if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
				return "", fmt.Errorf("Content-Digest %q is not a structured byte sequence", clip(v, 100))
			}
			raw, err := decodeB64(val[1 : len(val)-1])
			if err != nil || len(raw) != 32 {
				return "", fmt.Errorf("Content-Digest sha-256 %q is not 32 bytes of base64", clip(val, 100))
			}
			got = append(got, hex.EncodeToString(raw))
		}
	}
	if v := strings.ToLower(strings.TrimSpace(h.Get("X-Checksum-Sha256"))); v != "" {
		if !validSHA256(v) {
			return "", fmt.Errorf("X-Checksum-Sha256 %q is not 64 hex digits", clip(v, 100))
		}
		got = append(got, v)
	}
	for _, g := range got[min(1, len(got)):] {
		if g != got[0] {
			return "", errors.New("the download announces two different SHA-256 digests")
		}
	}
	if len(got) == 0 {
		return "", nil
	}
	return got[0], nil
}
