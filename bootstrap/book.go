package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/store"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// PeerStore is the part of store.Store the address book uses.
type PeerStore interface {
	PutPeer(ctx context.Context, p store.PeerRecord) error
	Peers(ctx context.Context) ([]store.PeerRecord, error)
}

var _ PeerStore = store.Store(nil)

// BookConfig configures a Book. Zero values take the defaults.
type BookConfig struct {
	// FlushInterval debounces writes: peers identified within one interval
	// are written together (default 5 s).
	FlushInterval time.Duration
	// TouchInterval refreshes LastSeen of the DHT peers still connected
	// (default 5 min).
	TouchInterval time.Duration
	// MaxAddrs bounds the addresses kept per peer (default 8).
	MaxAddrs int
	// MaxPeers bounds the peers Peers returns for a re-bootstrap
	// (default 32, most recently seen first).
	MaxPeers int
	// Protocol is the protocol a peer must speak to be recorded (default
	// dht.KadProtocol: only DHT servers are useful to re-bootstrap from).
	Protocol protocol.ID
}

func (c *BookConfig) setDefaults() {
	if c.FlushInterval <= 0 {
		c.FlushInterval = 5 * time.Second
	}
	if c.TouchInterval <= 0 {
		c.TouchInterval = 5 * time.Minute
	}
	if c.MaxAddrs <= 0 {
		c.MaxAddrs = 8
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = 32
	}
	if c.Protocol == "" {
		c.Protocol = dht.KadProtocol
	}
}

// Book records the DHT servers this node gets connected to in the store's
// peer address book and hands them back for a re-bootstrap, so a restarted
// node that has known peers needs no bootstrap node.
type Book struct {
	h   host.Host
	ps  PeerStore
	cfg BookConfig
	log *slog.Logger

	mu      sync.Mutex
	pending map[peer.ID][]ma.Multiaddr
	started bool
	closed  bool
	sub     event.Subscription
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	err     error
}

// NewBook builds a Book; nothing runs until Start.
func NewBook(h host.Host, ps PeerStore, cfg BookConfig, log *slog.Logger) (*Book, error) {
	if h == nil || ps == nil {
		return nil, errors.New("bootstrap: a host and a peer store are required")
	}
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Book{h: h, ps: ps, cfg: cfg, log: log.With("component", "bootstrap"), pending: map[peer.ID][]ma.Multiaddr{}}, nil
}

// Start subscribes to identify events and starts the writer goroutine.
func (b *Book) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("bootstrap: book closed")
	}
	if b.started {
		return errors.New("bootstrap: book already started")
	}
	sub, err := b.h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		return fmt.Errorf("bootstrap: subscribe to identify events: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.sub, b.cancel, b.started = sub, cancel, true
	b.wg.Add(1)
	go b.run(ctx, sub)
	return nil
}

func (b *Book) run(ctx context.Context, sub event.Subscription) {
	defer b.wg.Done()
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	touch := time.NewTicker(b.cfg.TouchInterval)
	defer touch.Stop()
	armed := false
	arm := func() {
		if !armed {
			flush.Reset(b.cfg.FlushInterval)
			armed = true
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Out():
			if !ok {
				return
			}
			e, ok := ev.(event.EvtPeerIdentificationCompleted)
			if !ok || !slices.Contains(e.Protocols, b.cfg.Protocol) {
				continue
			}
			addrs := e.ListenAddrs
			if len(addrs) == 0 {
				addrs = b.h.Peerstore().Addrs(e.Peer)
			}
			if b.note(e.Peer, addrs) {
				arm()
			}
		case <-touch.C:
			for _, p := range b.h.Network().Peers() {
				if ok, _ := b.h.Peerstore().SupportsProtocols(p, b.cfg.Protocol); len(ok) > 0 {
					if b.note(p, b.h.Peerstore().Addrs(p)) {
						arm()
					}
				}
			}
		case <-flush.C:
			armed = false
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := b.Flush(fctx); err != nil {
				b.log.Warn("address book write failed", "err", err)
			}
			cancel()
		}
	}
}

// note queues p with its dialable addresses; it reports whether anything
// was queued.
func (b *Book) note(p peer.ID, addrs []ma.Multiaddr) bool {
	if p == b.h.ID() {
		return false
	}
	var keep []ma.Multiaddr
	for _, a := range addrs {
		if len(keep) == b.cfg.MaxAddrs {
			break
		}
		if a == nil || isCircuit(a) || slices.ContainsFunc(keep, a.Equal) {
			continue
		}
		keep = append(keep, a)
	}
	if len(keep) == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending[p] = keep
	return true
}

func isCircuit(a ma.Multiaddr) bool {
	for _, c := range a {
		if c.Protocol().Code == ma.P_CIRCUIT {
			return true
		}
	}
	return false
}

// Flush writes the queued peers now.
func (b *Book) Flush(ctx context.Context) error {
	b.mu.Lock()
	batch := b.pending
	b.pending = map[peer.ID][]ma.Multiaddr{}
	b.mu.Unlock()
	now := time.Now()
	var errs []error
	for p, addrs := range batch {
		if err := b.ps.PutPeer(ctx, store.PeerRecord{ID: p, Addrs: addrs, LastSeen: now}); err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", p, err))
		}
	}
	if len(batch) > 0 {
		b.log.Debug("address book updated", "peers", len(batch), "errors", len(errs))
	}
	return errors.Join(errs...)
}

// Peers returns the address book for a re-bootstrap: at most MaxPeers
// peers with addresses, most recently seen first, never this node.
func (b *Book) Peers(ctx context.Context) ([]peer.AddrInfo, error) {
	recs, err := b.ps.Peers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read address book: %w", err)
	}
	var out []peer.AddrInfo
	for _, r := range recs {
		if len(out) == b.cfg.MaxPeers {
			break
		}
		if r.ID == b.h.ID() || r.ID.Validate() != nil || len(r.Addrs) == 0 {
			continue
		}
		out = append(out, peer.AddrInfo{ID: r.ID, Addrs: slices.Clone(r.Addrs)})
	}
	return out, nil
}

// Close stops the writer, writes what is queued (2 s at most) and waits.
// It is idempotent.
func (b *Book) Close() error {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		started := b.started
		b.mu.Unlock()
		if !started {
			return
		}
		b.cancel()
		b.wg.Wait()
		err := b.sub.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b.err = errors.Join(err, b.Flush(ctx))
	})
	return b.err
}

// Join bootstraps d from the configured peers and the address book
// together, so a node that has known peers joins even when no configured
// bootstrap node answers. It returns an error wrapping
// dht.ErrNoBootstrapPeers when no peer at all could be reached.
func Join(ctx context.Context, d *dht.DHT, configured []peer.AddrInfo, book *Book) error {
	all := slices.Clone(configured)
	if book != nil {
		known, err := book.Peers(ctx)
		if err != nil {
			return err
		}
		for _, k := range known {
			if !slices.ContainsFunc(all, func(x peer.AddrInfo) bool { return x.ID == k.ID }) {
				all = append(all, k)
			}
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("%w: none configured and the address book is empty (LAN discovery can still find peers)", dht.ErrNoBootstrapPeers)
	}
	return d.Bootstrap(ctx, all)
}
