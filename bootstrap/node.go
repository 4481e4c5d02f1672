package bootstrap

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// NodeConfig configures a bootstrap node.
type NodeConfig struct {
	// DHT tunes the DHT; ClientMode is ignored (a bootstrap node is a
	// server) and BootstrapPeers is replaced by Peers.
	DHT dht.Config
	// Peers are other bootstrap nodes to join (optional: the first node of
	// a network has nobody to join).
	Peers []peer.AddrInfo
	// Book, when set, remembers the DHT peers this node meets and rejoins
	// them after a restart.
	Book PeerStore
	// Verifier checks records this node fetches or reads (it hosts none);
	// nil means the open policy.
	Verifier *trust.Verifier
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Node is a running bootstrap node.
type Node struct {
	DHT   *dht.DHT
	Book  *Book
	h     host.Host
	start time.Time
	once  sync.Once
	err   error

	reach *p2p.Reachability
}

// StartNode starts a bootstrap node on h: a DHT server with no hosted
// agent. The host (and so the identity, from the key file the CLI loads
// with LoadOrCreateKey) belongs to the caller. It logs the node's full
// multiaddrs, which clients list with --bootstrap.
func StartNode(ctx context.Context, h host.Host, cfg NodeConfig, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("component", "bootstrap")
	v := cfg.Verifier
	if v == nil {
		var err error
		if v, err = trust.NewVerifier(trust.Config{Policy: trust.PolicyOpen}, nil); err != nil {
			return nil, err
		}
	}
	dcfg := cfg.DHT
	dcfg.ClientMode, dcfg.AutoMode = false, false
	dcfg.BootstrapPeers = nil
	d, err := dht.New(h, dcfg, v, nil, cfg.Metrics, log)
	if err != nil {
		return nil, err
	}
	n := &Node{DHT: d, h: h, start: time.Now()}
	if n.reach, err = p2p.WatchReachability(h, "agentd bootstrap reachability", nil); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	if cfg.Book != nil {
		if n.Book, err = NewBook(h, cfg.Book, BookConfig{}, log); err != nil {
			return nil, errors.Join(err, n.Close())
		}
		if err := n.Book.Start(); err != nil {
			return nil, errors.Join(err, n.Close())
		}
	}
	if err := d.Start(ctx); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	if len(cfg.Peers) > 0 || n.Book != nil {
		if err := Join(ctx, d, cfg.Peers, n.Book); err != nil {
			log.Warn("bootstrap node could not join other nodes; serving alone until they dial in", "err", err)
		}
	}
	addrs := n.Addrs()
	for _, a := range addrs {
		log.Info("bootstrap node listening", "multiaddr", a.String())
	}
	if len(addrs) == 0 {
		log.Warn("bootstrap node has no listen address; clients cannot reach it")
	}
	return n, nil
}

// Addrs returns the node's full multiaddrs (…/p2p/<peer id>): public
// addresses first, then private, then loopback.
func (n *Node) Addrs() []ma.Multiaddr {
	return FullAddrs(n.h)
}

// FullAddrs returns h's listen addresses with /p2p/<id> appended, public
// first, then private, then loopback.
func FullAddrs(h host.Host) []ma.Multiaddr {
	rank := func(a ma.Multiaddr) int {
		switch {
		case manet.IsIPLoopback(a):
			return 2
		case manet.IsPrivateAddr(a):
			return 1
		}
		return 0
	}
	addrs := slices.Clone(h.Addrs())
	slices.SortStableFunc(addrs, func(x, y ma.Multiaddr) int { return rank(x) - rank(y) })
	return Multiaddrs(peer.AddrInfo{ID: h.ID(), Addrs: addrs})
}

// Close stops the DHT and the address book (the host stays the caller's).
// It is idempotent.
func (n *Node) Close() error {
	n.once.Do(func() {
		var errs []error
		if n.reach != nil {
			errs = append(errs, n.reach.Close())
		}
		if n.DHT != nil {
			errs = append(errs, n.DHT.Close())
		}
		if n.Book != nil {
			errs = append(errs, n.Book.Close())
		}
		n.err = errors.Join(errs...)
	})
	return n.err
}

// RunNode runs a bootstrap node until ctx ends: StartNode, then ready (if
// non-nil) with the full multiaddrs, then Close when ctx is done.
func RunNode(ctx context.Context, h host.Host, cfg NodeConfig, log *slog.Logger, ready func([]ma.Multiaddr)) error {
	n, err := StartNode(ctx, h, cfg, log)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(n.Addrs())
	}
	<-ctx.Done()
	return n.Close()
}

// LoadOrCreateKey loads the Ed25519 peer key at path (protobuf-encoded, as
// trust.PeerKeyFile), creating it with mode 0600 when it does not exist,
// so a bootstrap node keeps its peer id across restarts.
func LoadOrCreateKey(path string) (crypto.PrivKey, error) {
	k, err := trust.LoadPeerKey(path)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create key directory: %w", err)
	}
	k, _, err = crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate peer key: %w", err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create peer key: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(path) // a partial key file must not be loaded next time
		return nil, fmt.Errorf("write peer key: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("sync peer key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write peer key: %w", err)
	}
	return k, nil
}
