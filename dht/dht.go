package dht

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p-kad-dht/records"
	lprecord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/multiformats/go-multihash"
)

// Sentinel errors of the DHT.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("dht closed")
	// ErrNotStarted is returned by operations that need Start first.
	ErrNotStarted = errors.New("dht not started")
	// ErrNoBootstrapPeers is returned by Bootstrap when no peer could be
	// reached (or none was given).
	ErrNoBootstrapPeers = errors.New("no bootstrap peer reachable")
	// ErrNotFound is returned by GetRecord when the DHT holds no valid
	// value for the id.
	ErrNotFound = errors.New("record not found in the DHT")
	// ErrEmptyQuery is returned by Find without skill and capability.
	ErrEmptyQuery = errors.New("query needs a skill or a capability")
	// ErrNoRecords is returned by Fetch when the provider holds no record
	// matching the query.
	ErrNoRecords = errors.New("provider holds no matching record")
	// ErrRejected is returned by Fetch when every record the provider sent
	// was rejected (signature, challenge, trust policy, wrong peer).
	ErrRejected = errors.New("every record from the provider was rejected")
	// ErrBadChallenge is the cause of a rejection whose challenge
	// signature does not verify.
	ErrBadChallenge = errors.New("challenge signature does not verify")
)

// Reason labels of rejections this package adds to trust.Reason values.
const (
	ReasonBadChallenge = "bad_challenge" // challenge signature does not verify
	ReasonNotOffered   = "not_offered"   // record does not offer what was asked
)

// Hosted is implemented by the node: the records this node serves.
type Hosted interface {
	// HostedRecords returns the hosted records matching q (empty fields match all).
	HostedRecords(q FetchQuery) []*record.SignedAgent
	// SignChallenge signs the challenge bytes for a hosted agent with that agent's key;
	// ok=false when this node does not hold that agent's key (then the dht package
	// signs with the host's peer key instead and marks the answer signer "peer").
	SignChallenge(agentID string, msg []byte) (sig []byte, ok bool, err error)
}

type noHosted struct{}

func (noHosted) HostedRecords(FetchQuery) []*record.SignedAgent { return nil }
func (noHosted) SignChallenge(string, []byte) ([]byte, bool, error) {
	return nil, false, nil
}

// Found is one verified answer of Find.
type Found struct {
	Record   *record.SignedAgent
	Provider peer.ID
	// Fetched is true when the record was fetched from the provider now,
	// false when it came from the live view (or is hosted by this node).
	Fetched bool
	// Latency is how long the fetch took (0 when not fetched).
	Latency time.Duration
}

// Status is a snapshot of the DHT's state for health reports and tests.
type Status struct {
	Started bool
	// ClientMode is true while the node does not answer Kademlia queries
	// (Config.ClientMode, or AutoMode on a node AutoNAT found private).
	ClientMode   bool
	RoutingTable int
	// ProvidedKeys and PublishedValues are the keys and values currently
	// kept alive by the reprovide and republish loop.
	ProvidedKeys    int
	PublishedValues int
	// LastProvide is when the last provide round ended; LastProvideMin is
	// the smallest number of remote peers that accepted a provider record
	// in that round (0 means some key reached nobody).
	LastProvide    time.Time
	LastProvideMin int
	// PendingRetries counts keys and values waiting for a retry.
	PendingRetries int
	// QueuedPuts counts values waiting for their paced put or being put.
	QueuedPuts int
	// LastRepublish is when the last republish round queued the values
	// not put within RepublishInterval (zero before the first round).
	LastRepublish time.Time
	// Lookups counts the closest-peer lookups run for provides and puts;
	// LookupsSaved those a small network's last answer stood in for
	// (smallNet).
	Lookups      int64
	LookupsSaved int64
}

// DHT is agentd's Kademlia node. Create it with New, then Start; Close
// stops everything it started.
type DHT struct {
	h      host.Host
	cfg    Config
	v      *trust.Verifier
	hosted Hosted
	m      *metrics.Metrics
	log    *slog.Logger
	val    Validator
	priv   crypto.PrivKey
	selfID string // h.ID() as text: the id of the node's own DHT value

	fetchSem chan struct{}
	limiter  *peerLimiter
	small    smallNet // the closest peers of a small network, for provides and puts

	changed    chan struct{}
	reannounce chan struct{}

	mu      sync.Mutex
	started bool
	closed  bool
	kad     *kaddht.IpfsDHT
	pm      *pb.ProtocolMessenger
	// addProvider sends one ADD_PROVIDER; nil sends it with pm. Tests
	// replace it to make some of the closest peers miss a provide.
	addProvider func(ctx context.Context, p peer.ID, key multihash.Multihash, self peer.AddrInfo) error
	want        map[string]*record.SignedAgent // hosted records by agent id
	dirty       map[string]struct{}            // agent ids changed since the loop last looked
	rvDirty     bool                           // the rendezvous keys changed
	rendezvous  []record.Key
	bootPeers   []peer.AddrInfo
	status      Status

	serveMu     sync.Mutex
	serveClosed bool
	serving     int
	serveWG     sync.WaitGroup

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New builds a DHT on h. It has no side effects: nothing listens or runs
// until Start. hosted may be nil (a bootstrap node hosts nothing); m and
// log may be nil.
func New(h host.Host, cfg Config, v *trust.Verifier, hosted Hosted, m *metrics.Metrics, log *slog.Logger) (*DHT, error) {
	if h == nil {
		return nil, errors.New("dht: a host is required")
	}
	if v == nil {
		return nil, errors.New("dht: a trust verifier is required")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	priv := h.Peerstore().PrivKey(h.ID())
	if priv == nil {
		return nil, errors.New("dht: the host's peerstore holds no private key for its own id")
	}
	if hosted == nil {
		hosted = noHosted{}
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &DHT{
		h: h, cfg: cfg, v: v, hosted: hosted, m: m,
		log:        log.With("component", "dht"),
		priv:       priv,
		selfID:     h.ID().String(),
		fetchSem:   make(chan struct{}, cfg.MaxConcurrentFetch),
		limiter:    newPeerLimiter(cfg.ServeRateLimit, cfg.ServeBurst),
		changed:    make(chan struct{}, 1),
		reannounce: make(chan struct{}, 1),
		want:       map[string]*record.SignedAgent{},
		dirty:      map[string]struct{}{},
	}
	d.val.Verified = NewVerifiedCache()
	d.val.OnReject = func(key string, err error) {
		d.m.Reject("dht_value", ValueRejectReason(err))
		d.log.Debug("DHT value refused", "key", truncate(key), "err", err)
	}
	if m != nil {
		d.small.count = func(outcome string) { m.DHTLookups.WithLabelValues(outcome).Inc() }
	}
	d.bootPeers = slices.Clone(cfg.BootstrapPeers)
	d.status.ClientMode = cfg.ClientMode
	return d, nil
}

// kadOptions are the kad-dht options agentd runs with (see the package doc
// and docs/protocol.md for why each is set).
func (d *DHT) kadOptions() []kaddht.Option {
	mode := kaddht.ModeServer
	switch {
	case d.cfg.ClientMode:
		mode = kaddht.ModeClient
	case d.cfg.AutoMode && d.cfg.AutoClientFirst:
		mode = kaddht.ModeAuto
	case d.cfg.AutoMode:
		mode = kaddht.ModeAutoServer
	}
	opts := []kaddht.Option{
		kaddht.Mode(mode),
		kaddht.ProtocolPrefix(ProtocolPrefix),
		kaddht.Concurrency(LookupConcurrency),
		kaddht.Validator(lprecord.NamespacedValidator{ValueNamespace: d.val}),
		kaddht.BootstrapPeersFunc(d.bootstrapPeers),
		kaddht.ProviderManagerOpts(
			records.ProvideValidity(d.cfg.ProvideValidity),
			records.ProviderAddrTTL(d.cfg.ProvideValidity),
			records.CleanupInterval(d.cfg.ProvideValidity/2),
		),
		kaddht.MaxRecordAge(d.cfg.ValueMaxAge),
		// Values past their age leave the bounded store within 15 min (at
		// the default 3 h), not an hour: a full store refuses new keys.
		kaddht.ValueGCInterval(max(d.cfg.ValueMaxAge/12, time.Minute)),
		kaddht.ValueDatastore(newBoundedValues(d.cfg.MaxStoredValues)),
	}
	return append(opts, d.cfg.kadExtra...)
}

// Start creates the Kademlia node, registers the record fetch handler,
// starts the reprovide/republish loop and, when Config.BootstrapPeers is
// set, bootstraps from them (a failure is logged, not returned: the node
// may still be reached by others or re-bootstrap later). ctx bounds only
// the bootstrap.
func (d *DHT) Start(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	if d.started {
		d.mu.Unlock()
		return errors.New("dht: already started")
	}
	kad, err := kaddht.New(d.h, d.kadOptions()...)
	if err != nil {
		d.mu.Unlock()
		return fmt.Errorf("dht: start kademlia: %w", err)
	}
	pm, err := pb.NewProtocolMessenger(kad.MessageSender())
	if err != nil {
		d.mu.Unlock()
		return errors.Join(fmt.Errorf("dht: protocol messenger: %w", err), kad.Close())
	}
	d.kad, d.pm = kad, pm
	d.started = true
	d.status.Started = true
	loopCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.h.SetStreamHandler(RecordProtocol, d.handleStream)
	d.wg.Add(1)
	go d.run(loopCtx)
	boot := slices.Clone(d.cfg.BootstrapPeers)
	d.mu.Unlock()

	d.log.Info("dht started", "mode", d.modeName(), "protocol", KadProtocol, "peer_id", d.h.ID())
	if len(boot) > 0 {
		if err := d.Bootstrap(ctx, boot); err != nil {
			d.log.Warn("dht bootstrap failed", "peers", len(boot), "err", err)
		}
	}
	return nil
}

func (d *DHT) modeName() string {
	switch {
	case d.cfg.ClientMode:
		return "client"
	case d.cfg.AutoMode:
		return "auto"
	}
	return "server"
}

// answersQueries reports whether the node answers Kademlia queries now: kad-dht
// registers its protocol handler in server mode only, and in AutoMode it
// adds and removes it as reachability changes.
func (d *DHT) answersQueries() bool {
	return slices.Contains(d.h.Mux().Protocols(), protocol.ID(KadProtocol))
}

func (d *DHT) running() (*kaddht.IpfsDHT, *pb.ProtocolMessenger, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, nil, ErrClosed
	}
	if !d.started {
		return nil, nil, ErrNotStarted
	}
	return d.kad, d.pm, nil
}

func (d *DHT) bootstrapPeers() []peer.AddrInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.bootPeers)
}

func (d *DHT) rememberBootstrap(peers []peer.AddrInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range peers {
		i := slices.IndexFunc(d.bootPeers, func(q peer.AddrInfo) bool { return q.ID == p.ID })
		if i >= 0 {
			d.bootPeers[i] = p
			continue
		}
		if len(d.bootPeers) < 256 {
			d.bootPeers = append(d.bootPeers, p)
		}
	}
}

// Bootstrap connects to peers (concurrently, FetchTimeout each), waits
// until the routing table holds at least one DHT server, refreshes it and
// then provides every key and puts every value again (the closest peers of
// each key may have changed).
// The peers are remembered: kad-dht redials them whenever its routing
// table empties. It returns an error wrapping ErrNoBootstrapPeers when
// none could be reached or none of the reached peers is a DHT server.
func (d *DHT) Bootstrap(ctx context.Context, peers []peer.AddrInfo) error {
	kad, _, err := d.running()
	if err != nil {
		return err
	}
	peers = slices.DeleteFunc(slices.Clone(peers), func(p peer.AddrInfo) bool { return p.ID == d.h.ID() || p.ID == "" })
	if len(peers) == 0 {
		return fmt.Errorf("%w: no peers given", ErrNoBootstrapPeers)
	}
	d.rememberBootstrap(peers)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok       int
		reached  []peer.ID
		firstErr error
		sem      = make(chan struct{}, 8)
	)
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, d.cfg.FetchTimeout)
			defer cancel()
			err := d.h.Connect(cctx, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				d.log.Debug("bootstrap dial failed", "peer_id", p.ID, "err", err)
				return
			}
			ok++
			reached = append(reached, p.ID)
		}()
	}
	wg.Wait()
	if ok == 0 {
		if firstErr == nil {
			firstErr = ctx.Err()
		}
		return fmt.Errorf("%w: 0 of %d reached: %v", ErrNoBootstrapPeers, len(peers), firstErr)
	}
	// Peers enter the routing table after identify and kad-dht's lookup
	// check: one FIND_NODE, which kad-dht does not try again for two
	// minutes when it fails or is slow (a loaded peer). Half the wait
	// later, the reached peers that identify says are DHT servers are
	// added directly: they are the ones this node was told to trust for a
	// start, and a peer that then does not answer is dropped by kad-dht
	// as any other.
	wctx, cancel := context.WithTimeout(ctx, d.cfg.QueryTimeout)
	defer cancel()
	rt := kad.RoutingTable()
	hctx, hcancel := context.WithTimeout(wctx, d.cfg.QueryTimeout/2)
	err = waitFor(hctx, func() bool { return rt.Size() > 0 })
	hcancel()
	if err != nil && wctx.Err() == nil {
		for _, p := range reached {
			if ps, perr := d.h.Peerstore().SupportsProtocols(p, KadProtocol); perr == nil && len(ps) > 0 {
				if added, aerr := rt.TryAddPeer(p, true, false); added {
					d.log.Debug("bootstrap peer added without kad-dht's lookup check", "peer_id", p)
				} else if aerr != nil {
					d.log.Debug("bootstrap peer not added", "peer_id", p, "err", aerr)
				}
			}
		}
		err = waitFor(wctx, func() bool { return rt.Size() > 0 })
	}
	if err != nil {
		return fmt.Errorf("%w: connected to %d of %d, but none joined the routing table (are they %s servers?): %v", ErrNoBootstrapPeers, ok, len(peers), KadProtocol, err)
	}
	select {
	case err := <-kad.RefreshRoutingTable():
		if err != nil {
			d.log.Debug("routing table refresh after bootstrap", "err", err)
		}
	case <-wctx.Done():
	}
	d.log.Info("dht bootstrapped", "reached", ok, "tried", len(peers), "routing_table", kad.RoutingTable().Size())
	// The closest peers of every key may have changed: announce again.
	d.signal(d.reannounce)
	return nil
}

// waitFor polls cond every 20 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	if cond() {
		return nil
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if cond() {
				return nil
			}
		}
	}
}

func (d *DHT) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// RoutingTableSize is the number of peers in the routing table (0 before
// Start or after Close).
func (d *DHT) RoutingTableSize() int {
	kad, _, err := d.running()
	if err != nil {
		return 0
	}
	return kad.RoutingTable().Size()
}

// Status returns a snapshot of the DHT's state.
func (d *DHT) Status() Status {
	d.mu.Lock()
	s := d.status
	s.Lookups, s.LookupsSaved = d.small.lookups.Load(), d.small.saved.Load()
	kad := d.kad
	ok := d.started && !d.closed
	d.mu.Unlock()
	if ok {
		s.RoutingTable = kad.RoutingTable().Size()
		s.ClientMode = !d.answersQueries()
	}
	return s
}

// SetRendezvous sets the extra keys this node provides besides its
// records' keys: the rendezvous keys of the shard topics it joined
// (record.RendezvousKey), by which other subscribers find it. The
// reprovide loop keeps them alive like the record keys.
func (d *DHT) SetRendezvous(keys []record.Key) {
	cp := slices.Clone(keys)
	d.mu.Lock()
	d.rendezvous = cp
	d.rvDirty = true
	d.mu.Unlock()
	d.signal(d.changed)
}

// FindPeers returns up to max providers of k other than this node (the
// subscribers of a shard topic, for its rendezvous key), bounded by
// Config.QueryTimeout.
func (d *DHT) FindPeers(ctx context.Context, k record.Key, max int) ([]peer.AddrInfo, error) {
	kad, _, err := d.running()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.QueryTimeout)
	defer cancel()
	var out []peer.AddrInfo
	for p := range kad.FindProvidersAsync(ctx, k.CID(), max+1) {
		if p.ID != d.h.ID() && len(out) < max {
			out = append(out, p)
		}
	}
	return out, nil
}

// SetProvided replaces the complete set of hosted records. The loop
// provides keys that are new at once, keeps reproviding the current ones,
// stops reproviding removed ones (their provider records then expire
// within ProvideValidity) and puts changed records as DHT values. It does
// not block on the network. It costs O(n) here; one registration is
// Provide or Unprovide, O(1) here and O(keys of that record) in the loop.
func (d *DHT) SetProvided(recs []*record.SignedAgent) {
	next := make(map[string]*record.SignedAgent, len(recs))
	for _, r := range recs {
		if r == nil {
			continue
		}
		if old, ok := next[r.Agent.AgentID]; ok && old.Agent.Seq >= r.Agent.Seq {
			continue
		}
		next[r.Agent.AgentID] = r
	}
	d.mu.Lock()
	if len(d.dirty) == 0 && len(next) > 0 {
		// One allocation instead of a map grown by doubling.
		d.dirty = make(map[string]struct{}, len(next))
	}
	for id, r := range d.want {
		if next[id] != r {
			d.dirty[id] = struct{}{}
		}
	}
	for id, r := range next {
		if d.want[id] != r {
			d.dirty[id] = struct{}{}
		}
	}
	d.want = next
	d.mu.Unlock()
	d.signal(d.changed)
}

// Provide adds or replaces one hosted record (see SetProvided).
func (d *DHT) Provide(sa *record.SignedAgent) {
	if sa == nil {
		return
	}
	d.mu.Lock()
	d.want[sa.Agent.AgentID] = sa
	d.dirty[sa.Agent.AgentID] = struct{}{}
	d.mu.Unlock()
	d.signal(d.changed)
}

// Unprovide removes one hosted record (see SetProvided).
func (d *DHT) Unprovide(agentID string) {
	d.mu.Lock()
	if _, ok := d.want[agentID]; ok {
		delete(d.want, agentID)
		d.dirty[agentID] = struct{}{}
	}
	d.mu.Unlock()
	d.signal(d.changed)
}

// ownRecordLocked is the record whose announce is also the value
// /agentd/<peer-id>: Config.OwnAgentID's, else the smallest agent id's.
func (d *DHT) ownRecordLocked() *record.SignedAgent {
	if d.cfg.OwnAgentID != "" {
		return d.want[d.cfg.OwnAgentID]
	}
	var own *record.SignedAgent
	for id, r := range d.want {
		if own == nil || id < own.Agent.AgentID {
			own = r
		}
	}
	return own
}

// Close stops the loop, the record handler and the Kademlia node and
// waits for them. The host is not closed. Close is idempotent.
func (d *DHT) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		started := d.started
		kad := d.kad
		cancel := d.cancel
		d.mu.Unlock()
		if !started {
			return
		}
		d.h.RemoveStreamHandler(RecordProtocol)
		cancel()
		d.serveMu.Lock()
		d.serveClosed = true
		d.serveMu.Unlock()
		d.serveWG.Wait()
		d.wg.Wait()
		d.closeErr = kad.Close()
	})
	return d.closeErr
}
