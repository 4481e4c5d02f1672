package dht

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
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
	seq uint64
	rec *record.SignedAgent // the hosted record, verified by the node
}

// bytes is the value stored under key: the record's Announce. It is built
// when a value is put, not kept: the loop holds a value per hosted agent,
// and the record itself is held by the live view anyway.
func (v value) bytes() []byte { return v.rec.MarshalAnnounce() }

// loopState is owned by the run goroutine.
type loopState struct {
	keys       map[[32]byte]record.Key
	refs       map[[32]byte]int        // how many sources want each key
	srcKeys    map[string][]record.Key // each source's keys: agent ids, and rendezvousSrc
	values     map[string]value
	failKeys   map[[32]byte]record.Key
	failValues map[string]value
	retry      backoff.Backoff
}

// run is the reprovide/republish loop. It owns every provide and put.
func (d *DHT) run(ctx context.Context) {
	defer d.wg.Done()
	st := &loopState{
		keys: map[[32]byte]record.Key{}, values: map[string]value{},
		refs: map[[32]byte]int{}, srcKeys: map[string][]record.Key{},
		failKeys: map[[32]byte]record.Key{}, failValues: map[string]value{},
		retry: backoff.Backoff{Base: d.cfg.RetryInterval, Max: d.cfg.ReprovideInterval},
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
			retry.Reset(st.retry.Next())
		} else {
			retry.Stop()
			st.retry.Reset()
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

// rendezvousSrc is the source name of the rendezvous keys in loopState
// (agent ids are UUIDs, never empty).
const rendezvousSrc = ""

// applyChange brings what the loop keeps alive up to date with the
// records and rendezvous keys changed since it last looked: O(keys of the
// changed records), not O(every hosted record).
func (d *DHT) applyChange(ctx context.Context, st *loopState) {
	d.mu.Lock()
	changed := make(map[string]*record.SignedAgent, len(d.dirty))
	for id := range d.dirty {
		changed[id] = d.want[id] // nil: removed
	}
	// A new map, not clear: Go maps keep their size, and after a bulk
	// change (a start with 100 000 hosted records) ranging over the
	// cleared map cost a walk of 100 000 empty slots at every later change.
	d.dirty = make(map[string]struct{})
	var rv []record.Key
	rvChanged := d.rvDirty
	if rvChanged {
		rv = slices.Clone(d.rendezvous)
		d.rvDirty = false
	}
	own := d.ownRecordLocked()
	d.mu.Unlock()

	var added []record.Key
	for id, r := range changed {
		var keys []record.Key
		if r != nil {
			keys = r.Agent.DHTKeys()
		}
		added = d.swapKeys(st, id, keys, added)
	}
	if rvChanged {
		added = d.swapKeys(st, rendezvousSrc, rv, added)
	}

	var puts []value
	put := func(v value) {
		if old, ok := st.values[v.key]; !ok || old.seq != v.seq || string(old.rec.Canonical) != string(v.rec.Canonical) {
			puts = append(puts, v)
		}
		st.values[v.key] = v
	}
	drop := func(k string) {
		delete(st.values, k)
		delete(st.failValues, k)
	}
	for id, r := range changed {
		if r == nil {
			drop(ValueKey(id))
			continue
		}
		put(value{key: ValueKey(id), seq: r.Agent.Seq, rec: r})
	}
	self := d.h.ID().String()
	if own != nil && own.Agent.PeerID == self {
		put(value{key: ValueKey(self), seq: own.Agent.Seq, rec: own})
	} else {
		drop(ValueKey(self))
	}

	if len(added) > 0 {
		d.provideKeys(ctx, st, added, false)
	}
	if len(puts) > 0 {
		d.putValues(ctx, st, puts)
	}
}

// swapKeys replaces the keys source src wants with keys, keeping a count
// per key: a key is provided while any source wants it. Keys no source
// wanted before are appended to added; keys no source wants any more are
// no longer reprovided (their provider records expire within
// ProvideValidity). New keys are counted before old ones are released, so
// a key a record keeps across an update is never dropped and re-added.
func (d *DHT) swapKeys(st *loopState, src string, keys []record.Key, added []record.Key) []record.Key {
	var mine []record.Key
	seen := make(map[[32]byte]bool, len(keys))
	for _, k := range keys {
		if seen[k.Digest] {
			continue
		}
		seen[k.Digest] = true
		mine = append(mine, k)
		if st.refs[k.Digest] == 0 {
			if _, ok := st.keys[k.Digest]; !ok {
				added = append(added, k)
			}
			st.keys[k.Digest] = k
		}
		st.refs[k.Digest]++
	}
	for _, k := range st.srcKeys[src] {
		if st.refs[k.Digest]--; st.refs[k.Digest] > 0 {
			continue
		}
		delete(st.refs, k.Digest)
		delete(st.keys, k.Digest)
		delete(st.failKeys, k.Digest)
		d.log.Debug("dht key no longer provided", "key", k.String())
	}
	if len(mine) == 0 {
		delete(st.srcKeys, src)
	} else {
		st.srcKeys[src] = mine
	}
	return added
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
	if kad, _, err := d.running(); err == nil && kad.RoutingTable().Size() == 0 {
		// Nobody to store them: retried with the failures (and all put
		// again when the node rejoins), without encoding and checking
		// each value for nothing — a start with 100 000 hosted records
		// spent a second of CPU here.
		for _, v := range vals {
			if cur, ok := st.values[v.key]; ok && cur.seq == v.seq {
				st.failValues[v.key] = v
			}
		}
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
	val := v.bytes()
	// The node verified the record it hosts; the check below still binds
	// it to its key and its validity window, and kad-dht's own validation
	// of the local copy finds it verified.
	d.val.Verified.put(sha256.Sum256(val), v.rec)
	if err := d.val.Validate(v.key, val); err != nil {
		return 0, fmt.Errorf("own value does not validate: %w", err)
	}
	peers, err := kad.GetClosestPeers(ctx, v.key)
	if err != nil && len(peers) == 0 {
		return 0, fmt.Errorf("closest peers: %w", err)
	}
	rec := lprecord.MakePutRecord(v.key, val)
	rec.TimeReceived = time.Now().UTC().Format(time.RFC3339Nano)
	return fanOut(peers, func(p peer.ID) error { return pm.PutValue(ctx, p, rec) }), nil
}

func (d *DHT) countProvide(outcome string) {
	if d.m == nil {
		return
	}
	d.m.Provides.WithLabelValues(outcome).Inc()
}
