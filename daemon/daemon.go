// Package daemon is the whole agentd daemon behind one call: Start (or
// Run) builds, from a config.Config, what `agentd run` runs — the identity
// in the data directory, the Badger store, the libp2p node with the DHT,
// gossip and LAN discovery, the SkillCenter and registry fallbacks, and the
// local API with every surface (REST, JSON-RPC, WebSocket, SkillCenter,
// MCP, A2A cards). cmd/agentd uses it; so can a Go program that embeds
// agentd (examples/embed).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/lan"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"golang.org/x/time/rate"
)

// DBDir is the Badger directory inside the data directory.
const DBDir = "db"

// defaultShutdownTimeout bounds the whole shutdown; past it run gives up and
// exits 1 (whatever is still open is released by the process exit).
const defaultShutdownTimeout = 10 * time.Second

// Options are the settings of a daemon that are not its configuration.
type Options struct {
	// Logger receives the daemon's logs (nil: discarded).
	Logger *slog.Logger
	// Version is reported by /healthz, the MCP server and the libp2p user
	// agent (default "embedded").
	Version string
	// APIAddrFile, when set, receives the bound API address (host:port and
	// a newline) once the API serves, and is removed on Close.
	APIAddrFile string
	// ShutdownTimeout bounds Close when its context has no deadline
	// (default 10 s).
	ShutdownTimeout time.Duration
	// Serving, when set, is called once by Run when Start has returned:
	// the stored registrations are loaded and the API serves (agentd run
	// lowers the GC target it started with there).
	Serving func()
}

func NodeConfig(ctx context.Context, cfg config.Config, log *slog.Logger) (node.Config, error) {
	list, err := bootstrap.PeersLog(cfg.Discovery.DHT, nil, log)
	if err != nil {
		return node.Config{}, fmt.Errorf("bootstrap peers: %w", err)
	}
	peers := ResolveBootstrap(ctx, list, log)
	hc := cfg.Discovery.HealthCheck
	allow := cfg.Trust.AllowList
	nc := node.Config{
		Listen:            cfg.Listen,
		Bootstrap:         peers,
		ResolveBootstrap:  reresolver(list, log),
		HeartbeatInterval: hc.HeartbeatInterval.D(),
		Timeout:           hc.Timeout.D(),
		UnhealthyAfter:    hc.UnhealthyThreshold,
		DisableSuspicion:  !hc.Suspicion,
		GossipBeatEvery:   hc.GossipBeatEvery,
		CacheTTL:          cfg.Cache.TTL.D(),
		NoStaleCache:      !cfg.Cache.Enabled,
		DisableDHT:        !cfg.Discovery.DHT.Enabled,
		Trust: trust.Config{Policy: trust.Policy(cfg.Trust.Policy), AllowList: allow,
			RotationGrace: cfg.Trust.RotationGrace.D()},
	}
	nc.DHT.ValuePutRate = rate.Limit(cfg.Discovery.DHT.ValuePutRate)
	switch cfg.Discovery.DHT.EffectiveMode() {
	case config.DHTModeClient:
		nc.DHT.ClientMode = true
	case config.DHTModeAuto:
		nc.DHT.AutoMode = true
		nc.DHT.AutoClientFirst = publicPeers(peers)
	}
	switch nc.Scope = cfg.Discovery.Scope; {
	case nc.Scope == "" && cfg.API.ServeRegistry:
		nc.Scope = node.ScopeFull // a registry lists the network
	case nc.Scope == "":
		nc.Scope = node.ScopeInterest
	}
	return nc, nil
}

// publicPeers reports whether any bootstrap peer has a public address: the
// node joins the internet, not only a LAN.
func publicPeers(peers []peer.AddrInfo) bool {
	for _, p := range peers {
		if slices.ContainsFunc(p.Addrs, manet.IsPublicAddr) {
			return true
		}
	}
	return false
}

// bootstrapResolveTimeout bounds the resolution of the bootstrap list's DNS
// entries at start: a dead resolver delays the start by at most this, and
// the address book and the IP entries still count.
const bootstrapResolveTimeout = 10 * time.Second

// ResolveBootstrap resolves the list's DNS entries (system resolver).
func ResolveBootstrap(ctx context.Context, list bootstrap.List, log *slog.Logger) []peer.AddrInfo {
	if !list.HasDNS() {
		return list.Peers
	}
	rctx, cancel := context.WithTimeout(ctx, bootstrapResolveTimeout)
	defer cancel()
	peers, warns := list.Resolve(rctx, nil)
	bootstrap.LogWarnings(log, warns)
	log.Info("bootstrap list resolved", "entries", len(list.Peers)+len(list.Names), "peers", len(peers))
	return peers
}

// reresolver resolves a bootstrap list with DNS entries again when the
// node must join anew; nil for a list without DNS entries.
func reresolver(list bootstrap.List, log *slog.Logger) func(context.Context) []peer.AddrInfo {
	if !list.HasDNS() {
		return nil
	}
	return func(ctx context.Context) []peer.AddrInfo { return ResolveBootstrap(ctx, list, log) }
}

// startNetwork starts the peer-to-peer side of the daemon: the node (host,
// DHT, gossip) on the store.
// MinFree maps storage.minFree onto store.Options (0 turns the guard off).
func MinFree(b config.ByteSize) int64 {
	if b == 0 {
		return -1
	}
	return int64(b) //nolint:gosec // validated <= config.MaxMinFree
}

func startNetwork(ctx context.Context, cfg config.Config, id *trust.Identity, st store.Store, m *metrics.Metrics, cat *skillcenter.Client, ver string, log *slog.Logger) (*node.Node, error) {
	nc, err := NodeConfig(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	nat, err := NATConfig(cfg.NAT, nc.Bootstrap, false)
	if err != nil {
		return nil, err
	}
	h, err := p2p.New(p2p.Config{
		Key:    id.PeerKey,
		Listen: cfg.Listen,
		NAT:    nat,
		// Many agents behind one NAT share its address.
		ConnsPerIP:  cfg.NAT.ConnsPerIP,
		LowWater:    cfg.Connections.LowWater,
		HighWater:   cfg.Connections.HighWater,
		GracePeriod: cfg.Connections.GracePeriod.D(),
		UserAgent:   "agentd/" + ver,
		// libp2p would register its metrics on Prometheus' global
		// registry; agentd gives each node its own (package metrics).
		DisableMetrics: true,
	})
	if err != nil {
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	chain, err := loadTrustStore(ctx, cfg, log)
	if err != nil {
		_ = h.Close() // best effort: the error returned says what failed
		return nil, err
	}
	opts := node.Options{Identity: id, Host: h, Store: st, Metrics: m, Logger: log}
	if chain != nil {
		opts.Chain = chain
	}
	if cat != nil {
		opts.Catalog = cat
	}
	n, err := node.New(nc, opts)
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	if l, err := newLAN(cfg, id, n, m, log); err != nil {
		_ = n.Close()
		_ = h.Close()
		return nil, err
	} else if l != nil {
		if err := n.SetLAN(l); err != nil {
			_ = n.Close()
			_ = h.Close()
			return nil, err
		}
	}
	if err := n.Start(ctx); err != nil {
		_ = n.Close()
		_ = h.Close()
		return nil, err
	}
	return n, nil
}

// Daemon is a running agentd: the identity, the store, the node (libp2p
// host, DHT, gossip, LAN discovery, the SkillCenter and registry fallbacks)
// and the local API with all its surfaces (REST, JSON-RPC, WebSocket,
// SkillCenter, MCP at /mcp, A2A cards). cmd/agentd's `agentd run` is
// Run; a Go program embeds the same daemon with Start.
type Daemon struct {
	// Identity is the daemon's identity (data directory keys, agent_id).
	Identity *trust.Identity
	// Node is the peer-to-peer node; API the local API server.
	Node *node.Node
	API  *api.Server

	log      *slog.Logger
	opts     Options
	apiAddr  string
	serveErr chan error
	closers  []closer
	once     sync.Once
	closeErr error
}

type closer struct {
	name  string
	close func(context.Context) error
}

// APIAddr is the address the API serves on (host:port).
func (d *Daemon) APIAddr() string { return d.apiAddr }

// APIURL is the API's base URL, for package client and MCP clients.
func (d *Daemon) APIURL() string { return "http://" + d.apiAddr }

// Failed is closed with an error on it if the API server stops serving
// on its own (it does not when Close stops it).
func (d *Daemon) Failed() <-chan error { return d.serveErr }

// Run is `agentd run`: Start, then wait for ctx to end (or the API server
// to fail), then Close. It returns nil after a clean shutdown.
func Run(ctx context.Context, cfg config.Config, o Options) error {
	d, err := Start(ctx, cfg, o)
	if err != nil {
		return err
	}
	if o.Serving != nil {
		o.Serving()
	}
	var runErr error
	select {
	case <-ctx.Done():
		d.log.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-d.serveErr:
		d.serveErr <- err // for the closer
		runErr = fmt.Errorf("API server: %w", err)
	}
	return errors.Join(runErr, d.Close(context.WithoutCancel(ctx)))
}

// Start loads the identity (creating it in cfg.DataDir on first start),
// opens the store, starts the network and serves the local API on
// cfg.API.Addr, and returns the running daemon; Close stops it. ctx bounds
// the start and is the daemon's lifetime context (its end stops the
// background work, as Close does). On an error everything Start opened is
// closed again. cfg must be valid (config.Config.Validate).
func Start(ctx context.Context, cfg config.Config, o Options) (_ *Daemon, err error) {
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = defaultShutdownTimeout
	}
	if o.Version == "" {
		o.Version = "embedded"
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{log: log, opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close(context.WithoutCancel(ctx)))
		}
	}()
	add := func(name string, f func(context.Context) error) { d.closers = append(d.closers, closer{name, f}) }

	_, statErr := os.Stat(filepath.Join(cfg.DataDir, trust.AgentIDFile))
	id, err := trust.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("identity in %s: %w", cfg.DataDir, err)
	}
	d.Identity = id
	idMsg := "identity loaded"
	if errors.Is(statErr, fs.ErrNotExist) {
		idMsg = "identity created (first start: new agent key, peer key and agent_id)"
	}
	log.Info(idMsg, "agent_id", id.AgentID, "peer_id", id.PeerID.String(), "data_dir", cfg.DataDir)

	dbDir := filepath.Join(cfg.DataDir, DBDir)
	st, err := store.Open(store.Options{
		Dir:           dbDir,
		CacheTTL:      cfg.Cache.TTL.D(),
		MaxEntries:    cfg.Cache.MaxSize,
		RefreshBefore: cfg.Cache.RefreshBeforeExpiry.D(),
		MinFreeBytes:  MinFree(cfg.Storage.MinFree),
		Logger:        log,
	})
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dbDir, err)
	}
	add("store", func(context.Context) error { return st.Close() })
	log.Info("store opened", "dir", dbDir)

	m := metrics.New(true)
	if sr, ok := st.(store.SpaceReporter); ok && sr.Space().Guarded {
		m.WatchSpace(func() (free, reserve, refused uint64) {
			sp := sr.Space()
			return sp.Free, sp.Reserve, sp.Refused
		})
	}
	cat, err := newCatalog(cfg, o.Version, log)
	if err != nil {
		return nil, err
	}
	if cat != nil {
		add("SkillCenter client", func(context.Context) error { return cat.Close() })
	}
	nd, err := startNetwork(ctx, cfg, id, st, m, cat, o.Version, log)
	if err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	d.Node = nd
	add("libp2p host", func(context.Context) error { return nd.Host().Close() })
	add("node", func(ctx context.Context) error { return nd.Shutdown(ctx) })
	if cfg.Registry.URL != "" {
		fb, err := skillcenter.NewFallback(skillcenter.FallbackConfig{
			URL: cfg.Registry.URL, Token: cfg.Registry.Token,
			Interval: cfg.Discovery.HealthCheck.HeartbeatInterval.D(), Timeout: cfg.Discovery.SkillCenter.Timeout.D(), Logger: log,
		}, skillcenter.FallbackDeps{
			Locals:   nd.Locals,
			P2PWorks: func() bool { return len(nd.Host().Network().Peers()) > 0 },
		})
		if err != nil {
			return nil, fmt.Errorf("registry fallback: %w", err)
		}
		if err := fb.Start(ctx); err != nil {
			return nil, fmt.Errorf("registry fallback: %w", err)
		}
		add("registry fallback", func(context.Context) error { return fb.Close() })
		log.Info("registry fallback configured", "registry", cfg.Registry.URL)
	}
	addrs := p2pAddrs(nd.Host().Addrs(), id.PeerID)
	log.Info("libp2p host listening", "peer_id", id.PeerID.String(), "addrs", addrs)

	ln, err := ListenAPI(cfg.API.Addr)
	if err != nil {
		return nil, err
	}
	var jwtPub []byte
	if cfg.API.JWTPublicKey != "" {
		if jwtPub, err = os.ReadFile(cfg.API.JWTPublicKey); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("api.jwtPublicKey: %w", err)
		}
	}
	apiSrv, err := api.New(nd, api.Config{
		Addr: ln.Addr().String(), JWTSecret: cfg.API.JWTSecret, JWTPublicKeyPEM: jwtPub,
		RequireAuthOnLoopback: cfg.API.RequireAuthOnLoopback, ServeRegistry: cfg.API.ServeRegistry, AgentCard: cfg.API.AgentCard,
		Version: o.Version,
	}, log)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("api: %w", err)
	}
	d.API = apiSrv
	srv := NewHTTPServer(apiSrv.Handler(), log)
	d.serveErr = make(chan error, 1)
	go func() {
		if err := srv.Serve(api.JSONErrorListener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.serveErr <- err
		}
	}()
	add("API server", func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = errors.Join(err, srv.Close())
		}
		select {
		case serr := <-d.serveErr:
			err = errors.Join(err, serr)
		default:
		}
		return err
	})
	// Closed before the HTTP server drains (closers run last first): the
	// WebSocket sessions, watch streams and MCP sessions end, so that the
	// drain does not wait for streams that never end on their own.
	add("API sessions", func(context.Context) error { return apiSrv.Close() })
	d.apiAddr = ln.Addr().String()
	if o.APIAddrFile != "" {
		if err := fsutil.WriteFileAtomic(o.APIAddrFile, []byte(d.apiAddr+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("write --api-addr-file: %w", err)
		}
		add("API address file", func(context.Context) error {
			if err := os.Remove(o.APIAddrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		})
	}
	log.Info("agentd running", "api", "http://"+d.apiAddr, "health", "http://"+d.apiAddr+"/healthz", "console", "http://"+d.apiAddr+"/ui/",
		"agent_id", id.AgentID, "peer_id", id.PeerID.String(), "version", o.Version)
	return d, nil
}

// closeGrace is what each remaining shutdown step gets once the shutdown
// deadline has passed.
const closeGrace = 2 * time.Second

// Close shuts the daemon down in the reverse order of Start: the API
// (sessions end, requests drain), the node (hosted agents unregistered
// with reason SHUTDOWN), the host, the store. It is bounded by ctx, or by
// Options.ShutdownTimeout when ctx has no deadline, and idempotent.
func (d *Daemon) Close(ctx context.Context) error {
	d.once.Do(func() {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d.opts.ShutdownTimeout)
			defer cancel()
		}
		var errs []error
		for i := len(d.closers) - 1; i >= 0; i-- {
			c := d.closers[i]
			stepCtx := ctx
			if ctx.Err() != nil {
				// A step that used up the deadline does not cost the
				// later ones their chance: the store, above all, is
				// still closed (each gets closeGrace).
				var cancel context.CancelFunc
				stepCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
				defer cancel()
			}
			if err := CloseWithin(stepCtx, c.close); err != nil {
				d.log.Error("shutdown step failed", "component", c.name, "err", err)
				errs = append(errs, fmt.Errorf("close %s: %w", c.name, err))
				continue
			}
			d.log.Debug("closed", "component", c.name)
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// NewHTTPServer is the HTTP server of the API and of a bootstrap node's
// /healthz and /metrics: bounded headers and timeouts.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// Above the API's own request timeout (15 s), so a slow discovery
		// gets its answer out; WebSocket sessions clear their deadlines.
		WriteTimeout:   20 * time.Second,
		IdleTimeout:    60 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// CloseWithin runs close and gives up when ctx ends first (the close keeps
// running in the background; the process is about to exit anyway).
func CloseWithin(ctx context.Context, close func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("did not finish: %w", ctx.Err())
	}
}

// ListenAPI listens on the API address and checks that what it bound is
// what the configuration allowed (config.Validate refuses non-loopback
// addresses without auth; a "localhost" that resolves elsewhere is refused
// here).
func ListenAPI(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("API listen on %s: %w", addr, err)
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			_ = ln.Close()
			return nil, fmt.Errorf("API address %s bound %s, which is not loopback", addr, ln.Addr())
		}
	}
	return ln, nil
}

// p2pAddrs returns the addresses with /p2p/<id> appended, the form peers
// dial and --bootstrap takes.
func p2pAddrs(addrs []ma.Multiaddr, id peer.ID) []string {
	out := make([]string, 0, len(addrs))
	ai := peer.AddrInfo{ID: id, Addrs: addrs}
	full, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil {
		for _, a := range addrs {
			out = append(out, a.String())
		}
		return out
	}
	for _, a := range full {
		out = append(out, a.String())
	}
	return out
}

// newLAN builds LAN discovery over the node, or returns nil when both
// mechanisms are off (--no-lan, or discovery.udp.enabled and
// discovery.mdns.enabled false).
func newLAN(cfg config.Config, id *trust.Identity, n *node.Node, m *metrics.Metrics, log *slog.Logger) (*lan.LAN, error) {
	d := cfg.Discovery
	if !d.UDP.Enabled && !d.MDNS.Enabled {
		log.Info("LAN discovery is off (--no-lan, or discovery.udp.enabled and discovery.mdns.enabled are false)")
		return nil, nil
	}
	v := n.View()
	deps := lan.Deps{
		Host: n.Host(), Identity: id, Verifier: n.Verifier(),
		Locals: n.Locals,
		Learn: func(sa *record.SignedAgent) {
			if err := v.Learn(sa, store.SourceLAN, true); err != nil {
				log.Debug("LAN record not applied", "agent_id", sa.Agent.AgentID, "err", err)
			}
		},
		LearnUnbound: func(sa *record.SignedAgent) error {
			_, err := n.LearnUnbound(sa, store.SourceLAN)
			return err
		},
		SceneMembers: func(scene string) []record.SceneMember {
			var out []record.SceneMember
			for _, a := range v.SceneMembers(scene) {
				ag := &a.Record.Agent
				for i := range ag.Skills {
					if slices.Contains(ag.Skills[i].Scenes, scene) {
						out = append(out, record.SceneMember{AgentID: ag.AgentID, SkillID: ag.Skills[i].SkillID, Endpoint: record.SkillEntriesFromAgent(ag)[i].Endpoint})
					}
				}
			}
			return out
		},
		Forget: func(agentID string) { v.Forget(agentID, "LAN_GOODBYE") },
		Status: v.SetStatus,
		Resolve: func(ctx context.Context, agentID string) (*record.SignedAgent, error) {
			r, err := n.GetAgent(ctx, agentID, true)
			if err != nil {
				return nil, err
			}
			if r.Record == nil {
				return nil, fmt.Errorf("agent %s has no signed record", agentID)
			}
			return r.Record, nil
		},
		Metrics: m, Logger: log,
	}
	if dh := n.DHT(); dh != nil {
		deps.Fetch = func(ctx context.Context, p peer.AddrInfo, agentID string) ([]*record.SignedAgent, error) {
			return dh.Fetch(ctx, p, dht.FetchQuery{AgentID: agentID})
		}
	}
	return lan.New(lan.Config{UDP: d.UDP, MDNS: d.MDNS, Interface: d.Interface}, deps)
}

// loadTrustStore loads the certificate trust store when trust.roots is
// configured, and reloads its CRLs and revoked serials on SIGHUP until ctx
// ends (a failed reload is logged and the previous state kept).
func loadTrustStore(ctx context.Context, cfg config.Config, log *slog.Logger) (*trust.Store, error) {
	tc := cfg.Trust
	if len(tc.Roots) == 0 {
		return nil, nil
	}
	ts, err := trust.LoadStore(trust.StoreConfig{Roots: tc.Roots, Intermediates: tc.Intermediates, CRLs: tc.CRLs, RevokedSerials: tc.RevokedSerials})
	if err != nil {
		return nil, fmt.Errorf("trust store: %w", err)
	}
	log.Info("trust store loaded", "roots", len(tc.Roots), "crls", len(tc.CRLs), "revoked_serials", len(tc.RevokedSerials))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := ts.Reload(); err != nil {
					log.Error("trust store reload failed; keeping the previous one", "err", err)
				} else {
					log.Info("trust store reloaded")
				}
			}
		}
	}()
	return ts, nil
}

// newCatalog builds the SkillCenter client when discovery.skillCenter is
// enabled: the resolver's catalog step, asked only when the live view,
// the LAN and the DHT found nothing (seed 001 §12.2).
func newCatalog(cfg config.Config, ver string, log *slog.Logger) (*skillcenter.Client, error) {
	sc := cfg.Discovery.SkillCenter
	if !sc.Enabled {
		return nil, nil
	}
	ttl := sc.Cache.TTL.D()
	if !sc.Cache.Enabled {
		ttl = -1
	}
	cat, err := skillcenter.NewClient(sc.URL, skillcenter.Options{
		Timeout: sc.Timeout.D(), CacheTTL: ttl, CacheEntries: cfg.Cache.MaxSize,
		UserAgent: "agentd/" + ver, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("skillcenter: %w", err)
	}
	log.Info("SkillCenter catalog configured", "url", sc.URL)
	return cat, nil
}
