package p2p

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	ma "github.com/multiformats/go-multiaddr"
)

// Reachability follows a host's AutoNAT verdict
// (EvtLocalReachabilityChanged, a stateful event: the current value, if
// any, arrives first). Close stops it.
type Reachability struct {
	v    atomic.Int32 // network.Reachability
	sub  event.Subscription
	wg   sync.WaitGroup
	once sync.Once
}

// WatchReachability starts following h's reachability. onChange, if not
// nil, is called with each verdict from the watcher's goroutine.
func WatchReachability(h host.Host, name string, onChange func(network.Reachability)) (*Reachability, error) {
	sub, err := h.EventBus().Subscribe(new(event.EvtLocalReachabilityChanged), eventbus.Name(name))
	if err != nil {
		return nil, err
	}
	r := &Reachability{sub: sub}
	r.wg.Go(func() {
		for e := range sub.Out() {
			v := e.(event.EvtLocalReachabilityChanged).Reachability
			r.v.Store(int32(v)) //nolint:gosec // three small values
			if onChange != nil {
				onChange(v)
			}
		}
	})
	return r, nil
}

// String is the verdict in lower case: "unknown", "public" or "private".
func (r *Reachability) String() string {
	return strings.ToLower(network.Reachability(r.v.Load()).String())
}

// Close stops the watcher and waits for it. It is idempotent.
func (r *Reachability) Close() error {
	var err error
	r.once.Do(func() {
		err = r.sub.Close()
		r.wg.Wait()
	})
	return err
}

// Relayed reports whether c goes through a circuit relay: its remote
// address holds /p2p-circuit (go-libp2p also marks such connections
// Limited while the relay bounds them).
func Relayed(c network.Conn) bool {
	if c.Stat().Limited {
		return true
	}
	_, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// OnlyRelayed reports whether every connection to the peer goes through a
// relay (false when there is none).
func OnlyRelayed(conns []network.Conn) bool {
	for _, c := range conns {
		if !Relayed(c) {
			return false
		}
	}
	return len(conns) > 0
}
