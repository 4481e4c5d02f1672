package dht

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	lprecord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// provideParallel bounds the keys provided (or values put) at once by the
// loop; each runs its own lookup and up to k stores.
const provideParallel = 4

// value is one DHT value the node keeps alive.
type value struct {
	key string
	val []byte
	seq uint64
}

// loopState is owned by the run goroutine.
type loopState struct {
	keys       map[[32]byte]record.Key
	values     map[string]value
	failKeys   map[[32]byte]record.Key
	failValues map[string]value
	backoff    time.Duration
}

// run is the reprovide/republish loop. It owns every provide and put.
func (d *DHT) run(ctx context.Context) {
	defer d.wg.Done()
	st := &loopState{
		keys: map[[32]byte]record.Key{}, values: map[string]value{},
		failKeys: map[[32]byte]record.Key{}, failValues: map[string]value{},
		backoff: d.cfg.RetryInterval,
	}
	reprovide := time.NewTicker(d.cfg.ReprovideInterval)
	defer reprovide.Stop()
	republish := time.NewTicker(d.cfg.RepublishInterval)
	defer republish.Stop()
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
			d.applyChange(ctx, st)
		case <-reprovide.C:
			d.provideKeys(ctx, st, mapValues(st.keys), true)
		case <-republish.C:
			d.putValues(ctx, st, mapValues(st.values))
		case <-retry.C:
			d.retryFailed(ctx, st)
		case <-d.reannounce:
			d.provideKeys(ctx, st, mapValues(st.keys), true)
			d.putValues(ctx, st, mapValues(st.values))
		case <-prune.C:
			d.limiter.prune(time.Now())
		}
		if ctx.Err() != nil {
			return
		}
		pending := len(st.failKeys) + len(st.failValues)
		d.mu.Lock()
		d.status.ProvidedKeys = len(st.keys)
		d.status.PublishedValues = len(st.values)
		d.status.PendingRetries = pending
		d.mu.Unlock()
		if pending > 0 {
			retry.Reset(st.backoff)
			st.backoff = min(2*st.backoff, d.cfg.ReprovideInterval)
		} else {
			retry.Stop()
			st.backoff = d.cfg.RetryInterval
		}
	}
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func (d *DHT) retryFailed(ctx context.Context, st *loopState) {
	keys, vals := mapValues(st.failKeys), mapValues(st.failValues)
	if len(keys) > 0 {
		d.provideKeys(ctx, st, keys, false)
	}
	if len(vals) > 0 {
		d.putValues(ctx, st, vals)
	}
}

// applyChange diffs the wanted records against what the loop keeps alive.
func (d *DHT) applyChange(ctx context.Context, st *loopState) {
	d.mu.Lock()
	recs := d.want
	rv := d.rendezvous
	d.mu.Unlock()

	keys := map[[32]byte]record.Key{}
	for _, r := range recs {
		for _, k := range r.Agent.DHTKeys() {
			keys[k.Digest] = k
		}
	}
	for _, k := range rv {
		keys[k.Digest] = k
	}
	var added []record.Key
	for dg, k := range keys {
		if _, ok := st.keys[dg]; !ok {
			added = append(added, k)
		}
	}
	for dg := range st.keys {
		if _, ok := keys[dg]; !ok {
			delete(st.failKeys, dg)
			d.log.Debug("dht key no longer provided", "key", st.keys[dg].String())
		}
	}
	st.keys = keys

	vals := d.valuesFor(recs)
	var changed []value
	for k, v := range vals {
		if old, ok := st.values[k]; !ok || old.seq != v.seq || string(old.val) != string(v.val) {
			changed = append(changed, v)
		}
	}
	for k := range st.failValues {
		if _, ok := vals[k]; !ok {
			delete(st.failValues, k)
		}
	}
	st.values = vals

	if len(added) > 0 {
		d.provideKeys(ctx, st, added, false)
	}
	if len(changed) > 0 {
		d.putValues(ctx, st, changed)
	}
}

// valuesFor builds the DHT values of the hosted records:
// /agentd/<agent-id> for each, and /agentd/<peer-id> for the node's own
// agent (Config.OwnAgentID, else the first record) when its record names
// this host.
func (d *DHT) valuesFor(recs []*record.SignedAgent) map[string]value {
	out := map[string]value{}
	self := d.h.ID().String()
	var own *record.SignedAgent
	for i, r := range recs {
		if d.cfg.OwnAgentID != "" && r.Agent.AgentID == d.cfg.OwnAgentID {
			own = r
		} else if d.cfg.OwnAgentID == "" && i == 0 {
			own = r
		}
		k := ValueKey(r.Agent.AgentID)
		if old, ok := out[k]; ok && old.seq >= r.Agent.Seq {
			continue
		}
		out[k] = value{key: k, val: r.MarshalAnnounce(), seq: r.Agent.Seq}
	}
	if own != nil && own.Agent.PeerID == self {
		k := ValueKey(self)
		out[k] = value{key: k, val: own.MarshalAnnounce(), seq: own.Agent.Seq}
	}
	return out
}

// provideKeys provides keys, provideParallel at a time. A key that reached
// no remote peer is kept for retry.
func (d *DHT) provideKeys(ctx context.Context, st *loopState, keys []record.Key, round bool) {
	if len(keys) == 0 {
		return
	}
	type result struct {
		k      record.Key
		stored int
		err    error
	}
	res := make([]result, len(keys))
	sem := make(chan struct{}, provideParallel)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				res[i] = result{k: k, err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, d.cfg.ProvideTimeout)
			defer cancel()
			n, err := d.provideKey(pctx, k)
			res[i] = result{k: k, stored: n, err: err}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	minStored := -1
	for _, r := range res {
		if _, still := st.keys[r.k.Digest]; !still {
			continue // removed meanwhile
		}
		switch {
		case r.err != nil:
			d.countProvide("error")
			d.log.Debug("dht provide failed", "key", r.k.String(), "err", r.err)
			st.failKeys[r.k.Digest] = r.k
		case r.stored == 0:
			d.countProvide("no_peers")
			d.log.Debug("dht provide reached no peer", "key", r.k.String())
			st.failKeys[r.k.Digest] = r.k
		default:
			d.countProvide("ok")
			d.log.Debug("dht provided", "key", r.k.String(), "cid", r.k.CID().String(), "stored", r.stored)
			delete(st.failKeys, r.k.Digest)
		}
		if minStored < 0 || r.stored < minStored {
			minStored = r.stored
		}
	}
	if minStored < 0 {
		return
	}
	d.mu.Lock()
	d.status.LastProvide = time.Now()
	d.status.LastProvideMin = minStored
	d.mu.Unlock()
	if round {
		d.log.Debug("dht reprovide round", "keys", len(keys), "min_stored", minStored)
	}
}

// provideKey adds this node as a provider of k locally, finds the k
// closest peers and sends each an ADD_PROVIDER; it returns how many sends
// succeeded (kad-dht's Provide hides that number).
func (d *DHT) provideKey(ctx context.Context, k record.Key) (int, error) {
	kad, pm, err := d.running()
	if err != nil {
		return 0, err
	}
	c := k.CID()
	if err := kad.Provide(ctx, c, false); err != nil {
		return 0, fmt.Errorf("local provide: %w", err)
	}
	mh := c.Hash()
	peers, err := kad.GetClosestPeers(ctx, string(mh))
	if err != nil && len(peers) == 0 {
		return 0, fmt.Errorf("closest peers: %w", err)
	}
	self := peer.AddrInfo{ID: d.h.ID(), Addrs: kad.FilteredAddrs()}
	if len(self.Addrs) == 0 {
		return 0, errors.New("this host has no address to announce")
	}
	return fanOut(peers, func(p peer.ID) error { return pm.PutProviderAddrs(ctx, p, mh, self) }), nil
}

// fanOut runs f for every peer concurrently and counts the successes.
func fanOut(peers []peer.ID, f func(peer.ID) error) int {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f(p) == nil {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

// putValues puts values, provideParallel at a time; values that reached
// no remote peer are kept for retry.
func (d *DHT) putValues(ctx context.Context, st *loopState, vals []value) {
	if len(vals) == 0 {
		return
	}
	stored := make([]int, len(vals))
	errs := make([]error, len(vals))
	sem := make(chan struct{}, provideParallel)
	var wg sync.WaitGroup
	for i, v := range vals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, d.cfg.ProvideTimeout)
			defer cancel()
			stored[i], errs[i] = d.putValue(pctx, v)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for i, v := range vals {
		cur, still := st.values[v.key]
		if !still || cur.seq != v.seq {
			continue
		}
		if errs[i] != nil || stored[i] == 0 {
			d.log.Debug("dht put value failed", "key", v.key, "stored", stored[i], "err", errs[i])
			st.failValues[v.key] = v
			continue
		}
		d.log.Debug("dht put value", "key", v.key, "seq", v.seq, "stored", stored[i])
		delete(st.failValues, v.key)
	}
}

// putValue validates v, finds the closest peers of its key and sends each
// a PUT_VALUE; it returns how many stored it (they echo the record back).
func (d *DHT) putValue(ctx context.Context, v value) (int, error) {
	kad, pm, err := d.running()
	if err != nil {
		return 0, err
	}
	if err := d.val.Validate(v.key, v.val); err != nil {
		return 0, fmt.Errorf("own value does not validate: %w", err)
	}
	peers, err := kad.GetClosestPeers(ctx, v.key)
	if err != nil && len(peers) == 0 {
		return 0, fmt.Errorf("closest peers: %w", err)
	}
	rec := lprecord.MakePutRecord(v.key, v.val)
	rec.TimeReceived = time.Now().UTC().Format(time.RFC3339Nano)
	return fanOut(peers, func(p peer.ID) error { return pm.PutValue(ctx, p, rec) }), nil
}

func (d *DHT) countProvide(outcome string) {
	if d.m == nil {
		return
	}
	d.m.Provides.WithLabelValues(outcome).Inc()
}
