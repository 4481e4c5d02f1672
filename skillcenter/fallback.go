package skillcenter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
)

// Fallback defaults.
const (
	// DefaultFallbackInterval is how often the fallback checks P2P and,
	// while registering, posts the hosted records (the seed-001 heartbeat
	// interval, so a registry that times agents out after 3 missed beats
	// keeps them healthy).
	DefaultFallbackInterval = 5 * time.Second
	// DefaultFallbackDownAfter and DefaultFallbackUpAfter are the
	// hysteresis: registration starts after that many checks in a row
	// find P2P not working, and stops after that many find it working.
	DefaultFallbackDownAfter = 2
	DefaultFallbackUpAfter   = 3
)

// FallbackConfig configures the registry fallback (seed 000 §3.2, the
// rollback path).
type FallbackConfig struct {
	// URL is the registry's base URL: POST URL/agents (a seed-000
	// registry, an agentd with api.serveRegistry, or the agentd mirror).
	URL string
	// Token is the bearer token (a JWT with discover:write for agentd).
	Token string
	// Interval is the check and refresh period (default 5 s).
	Interval time.Duration
	// DownAfter / UpAfter are the hysteresis (defaults 2 and 3).
	DownAfter, UpAfter int
	// Timeout bounds one POST (default 10 s).
	Timeout time.Duration
	// HTTPClient sends the requests (default: one of its own).
	HTTPClient *http.Client
	// Logger receives the fallback's logs (default: discarded).
	Logger *slog.Logger
}

// FallbackDeps are what the fallback watches and posts.
type FallbackDeps struct {
	// Locals returns the signed records this node hosts (node.Locals).
	Locals func() []*record.SignedAgent
	// P2PWorks reports whether a peer is reachable by LAN or DHT (e.g. the
	// node has at least one connected peer).
	P2PWorks func() bool
}

// FallbackStatus describes the fallback for health reports.
type FallbackStatus struct {
	// Active says the node is registering with the registry now.
	Active bool `json:"active"`
	// LastPost is when the last successful POST was made.
	LastPost time.Time `json:"last_post,omitzero"`
	// LastError is the last POST error ("" after a success).
	LastError string `json:"last_error,omitempty"`
	// Posts counts successful POSTs.
	Posts uint64 `json:"posts"`
}

// Fallback registers this node's agents with a central registry while P2P
// does not work, and stops once it works again (seed 000 §3.2: "If mDNS
// fails, agents immediately register with the central registry. When the
// mDNS interface becomes available again, they suppress registry
// updates"). Every Interval it asks P2PWorks; after DownAfter negative
// answers in a row it becomes active and POSTs each hosted record (a
// signed Announce) to URL/agents with the bearer token, again every
// Interval so the registry keeps them alive; after UpAfter positive
// answers in a row it stops posting and the registry lets the entries
// expire. Start it once; Close stops it and waits.
type Fallback struct {
	cfg  FallbackConfig
	deps FallbackDeps
	hc   *http.Client
	own  bool
	url  string
	log  *slog.Logger

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
	st      FallbackStatus
	kick    chan struct{}
}

// NewFallback builds a fallback without starting it.
func NewFallback(cfg FallbackConfig, deps FallbackDeps) (*Fallback, error) {
	if deps.Locals == nil || deps.P2PWorks == nil {
		return nil, errors.New("skillcenter: the fallback needs Locals and P2PWorks")
	}
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("skillcenter: registry URL %q must be http:// or https:// with a host", cfg.URL)
	}
	if strings.ContainsAny(cfg.Token, " \t\r\n") {
		return nil, errors.New("skillcenter: the registry token must not contain whitespace")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultFallbackInterval
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = DefaultFallbackDownAfter
	}
	if cfg.UpAfter <= 0 {
		cfg.UpAfter = DefaultFallbackUpAfter
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	f := &Fallback{cfg: cfg, deps: deps, hc: cfg.HTTPClient, url: u.String() + "/agents", log: cfg.Logger, kick: make(chan struct{}, 1)}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.hc == nil {
		f.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		f.own = true
	}
	return f, nil
}

// Start starts the loop; it runs until Close (ctx only carries values).
func (f *Fallback) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started || f.closed {
		return errors.New("skillcenter: fallback already started or closed")
	}
	f.started = true
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	f.done = make(chan struct{})
	go f.loop(lctx)
	return nil
}

// Close stops the loop and waits for it. It is idempotent.
func (f *Fallback) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	cancel, done := f.cancel, f.done
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if f.own {
		f.hc.CloseIdleConnections()
	}
	return nil
}

// Refresh asks for an immediate round (the hosted records changed).
func (f *Fallback) Refresh() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Status returns the current state.
func (f *Fallback) Status() FallbackStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *Fallback) loop(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	down, up := 0, 0
	for {
		if f.deps.P2PWorks() {
			up, down = up+1, 0
		} else {
			down, up = down+1, 0
		}
		f.mu.Lock()
		active := f.st.Active
		switch {
		case !active && down >= f.cfg.DownAfter:
			f.st.Active, active = true, true
			f.log.Warn("no peer reachable by LAN or DHT; registering with the registry", "registry", f.url)
		case active && up >= f.cfg.UpAfter:
			f.st.Active, active = false, false
			f.log.Info("P2P works again; registry updates stopped", "registry", f.url)
		}
		f.mu.Unlock()
		if active {
			f.postAll(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kick:
		}
	}
}

// postAll posts every hosted record once.
func (f *Fallback) postAll(ctx context.Context) {
	locals := f.deps.Locals()
	var firstErr error
	ok := 0
	for _, sa := range locals {
		if ctx.Err() != nil {
			return
		}
		if err := f.post(ctx, sa); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("agent %s: %w", sa.Agent.AgentID, err)
			}
			continue
		}
		ok++
	}
	f.mu.Lock()
	prev := f.st.LastError
	if ok > 0 {
		f.st.LastPost = time.Now()
		f.st.Posts += uint64(ok)
	}
	if firstErr != nil {
		f.st.LastError = firstErr.Error()
	} else {
		f.st.LastError = ""
	}
	cur := f.st.LastError
	f.mu.Unlock()
	switch {
	case cur != "" && cur != prev:
		f.log.Warn("registry registration failed", "registry", f.url, "err", firstErr)
	case cur == "" && prev != "":
		f.log.Info("registry registration works again", "registry", f.url, "agents", ok)
	}
}

func (f *Fallback) post(ctx context.Context, sa *record.SignedAgent) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(sa.MarshalAnnounce()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentd-registry-fallback")
	if f.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return httpErrorOf(resp, b)
}
