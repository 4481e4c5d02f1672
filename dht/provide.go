package dht

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/record"
	lprecord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// provideParallel bounds the keys provided (or values put) at once by the
// loop; each runs its own lookup and up to k stores.
const provideParallel = 4

// value is one DHT value the node keeps alive: the record whose Announce
// is stored, under ValueKey(id). The loop's maps and queue name a value
// by its id (an agent id, or the node's peer id for its own value), not
// by its key: an agent's id is its record's own string, so a hosted value
// costs no string of its own (48 bytes a record at 100 000), and the value
// is 16 bytes (its seq is the record's).
type value struct {
	rec *record.SignedAgent // the hosted record, verified by the node
	// putAt is when this seq of the value last reached a peer (Unix ns; 0:
	// never). The republish round skips a value put less than
	// RepublishInterval ago: a hosted record is signed again with a
	// quarter of its TTL left (after 45 min by default) and its new seq is
	// put at once, so with the default 1 h interval the round puts only
	// what nothing else did.
	putAt int64
}

// bytes is the value stored under key: the record's Announce. It is built
// when a value is put, not kept: the loop holds a value per hosted agent,
// and the record itself is held by the live view anyway.
func (v value) bytes() []byte { return v.rec.MarshalAnnounce() }

// seq is the value's version: its record's seq.
func (v value) seq() uint64 { return v.rec.Agent.Seq }

// loopState is owned by the run goroutine.
type loopState struct {
	keys     map[[32]byte]record.Key
	refs     map[[32]byte]int // how many sources want each key
	rvKeys   []record.Key     // the rendezvous keys counted in refs (a hosted record's are its DHTKeys)
	values   map[string]value // by id (ValueKey)
	failKeys map[[32]byte]record.Key
	// failValues are the ids of values whose last put reached no peer
	// (the value itself is in values), unless failAll: then every value
	// waits for a retry. A node alone (a registry loading 100 000 records
	// before any peer joins) has every value fail; an entry each was 85
	// bytes a record.
	failValues map[string]struct{}
	failAll    bool
	retry      backoff.Backoff

	// Value puts are paced (Config.ValuePutRate): puts waits for its
	// turn, inflight are running, lim hands out the turns.
	puts       putQueue
	inflight   map[string]bool
	lim        *rate.Limiter
	roundStart time.Time // when the last republish round was queued
}

// newLoopState returns the loop's state before it holds anything.
func newLoopState(cfg Config) *loopState {
	return &loopState{
		keys: map[[32]byte]record.Key{}, values: map[string]value{},
		refs:     map[[32]byte]int{},
		failKeys: map[[32]byte]record.Key{}, failValues: map[string]struct{}{},
		retry:    backoff.Backoff{Base: cfg.RetryInterval, Max: cfg.ReprovideInterval},
		puts:     newPutQueue(),
		inflight: map[string]bool{},
		lim:      rate.NewLimiter(cfg.ValuePutRate, cfg.ValuePutBurst),
	}
}

// run is the reprovide/republish loop. It owns every provide and put.
func (d *DHT) run(ctx context.Context) {
	defer d.wg.Done()
	st := newLoopState(d.cfg)
	// Puts still running when ctx ends send their result nowhere.
	putDone := make(chan putResult, maxPutsInFlight)
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	reprovide := time.NewTicker(d.cfg.ReprovideInterval)
	defer reprovide.Stop()
	republish := time.NewTicker(d.cfg.RepublishInterval)
	defer republish.Stop()
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	// retry is armed while keys or values wait for a retry. Only a retry
	// that fails again re-arms it, a backoff step further: when every
	// pass of the loop re-armed it (the prune tick every minute, each
	// change), it never fired, and the values of agents registered while
	// the node had no peer waited for the hourly republish round.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	retryArmed := false

	for {
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
			d.applyChange(ctx, st)
		case <-reprovide.C:
			d.provideKeys(ctx, st, mapValues(st.keys), true)
		case <-republish.C:
			// A round still being put (more values than the rate puts
			// in an interval) is not queued again on top of itself.
			if st.puts.routineLen() == 0 {
				st.roundStart = time.Now()
				d.putValues(st, dueValues(st.values, st.roundStart, d.cfg.RepublishInterval), false)
			}
		case <-retry.C:
			retryArmed = false
			d.retryFailed(ctx, st)
		case <-d.reannounce:
			d.provideKeys(ctx, st, mapValues(st.keys), true)
			d.putValues(st, slices.Collect(maps.Keys(st.values)), false)
		case r := <-putDone:
			d.putFinished(st, r)
		case <-pace.C:
		case <-prune.C:
			d.limiter.prune(time.Now())
		}
		if ctx.Err() != nil {
			return
		}
		d.drainPuts(ctx, st, putDone, pace)
		pending := len(st.failKeys) + st.failedValues()
		d.mu.Lock()
		d.status.ProvidedKeys = len(st.keys)
		d.status.PublishedValues = len(st.values)
		d.status.PendingRetries = pending
		d.status.QueuedPuts = st.puts.len() + len(st.inflight)
		d.status.LastRepublish = st.roundStart
		d.mu.Unlock()
		switch {
		case pending > 0 && !retryArmed:
			retry.Reset(st.retry.Next())
			retryArmed = true
		case pending == 0:
			retry.Stop()
			retryArmed = false
			st.retry.Reset()
		}
	}
}

// dueValues returns the values not put within the last interval before
// now. A value skipped by one round is due at the next, so no value goes
// longer than two intervals (plus its wait in the queue) between puts,
// within ValueMaxAge's three.
func dueValues(values map[string]value, now time.Time, interval time.Duration) []string {
	cut := now.Add(-interval).UnixNano()
	var out []string
	for id, v := range values {
		if v.putAt <= cut {
			out = append(out, id)
		}
	}
	return out
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func (d *DHT) retryFailed(ctx context.Context, st *loopState) {
	if keys := mapValues(st.failKeys); len(keys) > 0 {
		d.provideKeys(ctx, st, keys, false)
	}
	if st.failAll {
		for id := range st.values {
			st.puts.push(id, true)
		}
		st.failAll = false
		return
	}
	for id := range st.failValues {
		st.puts.push(id, true)
	}
}

// failedValues is how many values wait for a retry.
func (st *loopState) failedValues() int {
	if st.failAll {
		return len(st.values)
	}
	return len(st.failValues)
}

// valueFailed marks the value id (one of values) as waiting for a retry.
// Once every value is, one flag says so instead of an entry each.
func (st *loopState) valueFailed(id string) {
	if st.failAll {
		return
	}
	st.failValues[id] = struct{}{}
	if len(st.failValues) == len(st.values) {
		st.failAll = true
		st.failValues = map[string]struct{}{}
	}
}

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
		var keys, old []record.Key
		if r != nil {
			keys = r.Agent.DHTKeys()
		}
		// The keys counted for the agent are those of the record the loop
		// holds as its value: derived again rather than kept (3 keys of
		// 64 bytes per hosted agent, 43 MB at 100 000).
		if v, ok := st.values[id]; ok {
			old = v.rec.Agent.DHTKeys()
		}
		added = d.swapKeys(st, old, keys, added)
	}
	if rvChanged {
		added = d.swapKeys(st, st.rvKeys, rv, added)
		st.rvKeys = rv
	}

	var puts []string
	put := func(id string, v value) {
		if old, ok := st.values[id]; !ok || old.seq() != v.seq() || (old.rec != v.rec && old.rec.Hash() != v.rec.Hash()) {
			puts = append(puts, id)
		} else {
			v.putAt = old.putAt // the same value: its last put still counts
		}
		st.values[id] = v
	}
	drop := func(id string) {
		delete(st.values, id)
		delete(st.failValues, id)
	}
	for id, r := range changed {
		if r == nil {
			drop(id)
			continue
		}
		// The record's own string, not the dirty set's.
		put(r.Agent.AgentID, value{rec: r})
	}
	self := d.selfID
	if own != nil && own.Agent.PeerID == self {
		put(self, value{rec: own})
	} else {
		drop(self)
	}

	if len(added) > 0 {
		d.provideKeys(ctx, st, added, false)
	}
	if len(puts) > 0 {
		d.putValues(st, puts, true)
	}
}

// swapKeys replaces the keys old of one source (a hosted agent, or the
// rendezvous keys) with keys, keeping a count per key: a key is provided
// while any source wants it. Keys no source wanted before are appended to
// added; keys no source wants any more are no longer reprovided (their
// provider records expire within ProvideValidity). New keys are counted
// before old ones are released, so a key a record keeps across an update
// is never dropped and re-added.
func (d *DHT) swapKeys(st *loopState, old, keys []record.Key, added []record.Key) []record.Key {
	for _, k := range dedupKeys(keys) {
		if st.refs[k.Digest] == 0 {
			if _, ok := st.keys[k.Digest]; !ok {
				added = append(added, k)
			}
			st.keys[k.Digest] = k
		}
		st.refs[k.Digest]++
	}
	for _, k := range dedupKeys(old) {
		if st.refs[k.Digest]--; st.refs[k.Digest] > 0 {
			continue
		}
		delete(st.refs, k.Digest)
		delete(st.keys, k.Digest)
		delete(st.failKeys, k.Digest)
		d.log.Debug("dht key no longer provided", "key", k.String())
	}
	return added
}

// dedupKeys drops repeated keys (a record's forms can coincide), keeping
// the first of each.
func dedupKeys(keys []record.Key) []record.Key {
	seen := make(map[[32]byte]struct{}, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if _, dup := seen[k.Digest]; !dup {
			seen[k.Digest] = struct{}{}
			out = append(out, k)
		}
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
		stored int // peers that accepted the ADD_PROVIDER
		asked  int // the closest peers found, each sent one
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
			n, asked, err := d.provideKey(pctx, k)
			res[i] = result{k: k, stored: n, asked: asked, err: err}
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
		case fewStored(r.stored, r.asked):
			// A lookup ends once the few peers closest to the key have
			// answered; if they are among those that missed the record,
			// nobody finds it until the next reprovide. Retried like a
			// failure, with the same backoff.
			d.countProvide("partial")
			d.log.Debug("dht provide reached few of the closest peers", "key", r.k.String(), "cid", r.k.CID().String(), "stored", r.stored, "asked", r.asked)
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
func (d *DHT) provideKey(ctx context.Context, k record.Key) (stored, asked int, err error) {
	kad, pm, err := d.running()
	if err != nil {
		return 0, 0, err
	}
	c := k.CID()
	if err := kad.Provide(ctx, c, false); err != nil {
		return 0, 0, fmt.Errorf("local provide: %w", err)
	}
	mh := c.Hash()
	peers, err := d.small.closest(ctx, kad.RoutingTable().Size(), string(mh), kad.GetClosestPeers)
	if err != nil && len(peers) == 0 {
		return 0, 0, fmt.Errorf("closest peers: %w", err)
	}
	self := peer.AddrInfo{ID: d.h.ID(), Addrs: kad.FilteredAddrs()}
	if len(self.Addrs) == 0 {
		return 0, 0, errors.New("this host has no address to announce")
	}
	send := pm.PutProviderAddrs
	d.mu.Lock()
	if d.addProvider != nil {
		send = d.addProvider
	}
	d.mu.Unlock()
	stored = fanOut(peers, func(p peer.ID) error { return send(ctx, p, mh, self) })
	if stored < len(peers) {
		d.small.forget()
	}
	return stored, len(peers), nil
}

// fewStored reports whether a provide that reached stored of the asked
// closest peers is to be retried: fewer than half of them have the record.
func fewStored(stored, asked int) bool {
	return stored*2 < asked
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

// putValues queues values to be put: urgent ones (new and changed
// records, retries) before the republish round's.
func (d *DHT) putValues(st *loopState, ids []string, urgent bool) {
	for _, id := range ids {
		st.puts.push(id, urgent)
	}
}

// putResult is the outcome of one value put.
type putResult struct {
	id     string
	v      value
	stored int
	err    error
}

// drainPuts starts the queued puts the rate allows, at most
// maxPutsInFlight at a time, and arms pace for the next turn. Each put runs
// in its own goroutine (owned by d.wg, ended by ctx) and reports on done.
func (d *DHT) drainPuts(ctx context.Context, st *loopState, done chan<- putResult, pace *time.Timer) {
	if st.puts.len() == 0 {
		return
	}
	if kad, _, err := d.running(); err == nil && kad.RoutingTable().Size() == 0 {
		// Nobody to store them: retried with the failures (and all put
		// again when the node rejoins), without encoding and checking
		// each value for nothing — a start with 100 000 hosted records
		// spent a second of CPU here.
		for {
			k, ok := st.puts.pop()
			if !ok {
				break
			}
			if _, ok := st.values[k]; ok {
				st.valueFailed(k)
			}
		}
		return
	}
	var busy []string // ids with a put running: queued again after it
	for len(st.inflight) < maxPutsInFlight {
		k, ok := st.puts.peek()
		if !ok {
			break
		}
		v, still := st.values[k]
		if !still {
			st.puts.pop()
			continue
		}
		if st.inflight[k] {
			st.puts.pop()
			busy = append(busy, k)
			continue
		}
		if !st.lim.Allow() {
			break
		}
		st.puts.pop()
		st.inflight[k] = true
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			pctx, cancel := context.WithTimeout(ctx, d.cfg.ProvideTimeout)
			n, err := d.putValue(pctx, k, v)
			cancel()
			select {
			case done <- putResult{id: k, v: v, stored: n, err: err}:
			case <-ctx.Done():
			}
		}()
	}
	for _, k := range busy {
		st.puts.push(k, true)
	}
	if st.puts.len() > 0 && len(st.inflight) < maxPutsInFlight {
		// Wait for as many turns as there are puts to start (up to the
		// burst), not for the next one: drained one put per turn, the
		// queue woke the loop, a put goroutine and the connection's
		// readers from sleep 50 times a second. A node with one peer
		// putting 50 values a second used 8.4 % of a core that way and
		// 4.0 % in bursts of 10 (docs/performance.md, "The DHT's upkeep").
		r := st.lim.ReserveN(time.Now(), min(st.puts.len(), d.cfg.ValuePutBurst, maxPutsInFlight-len(st.inflight)))
		wait := r.Delay()
		r.Cancel()
		pace.Reset(max(wait, time.Millisecond))
	}
}

// putFinished records a put's outcome: a value that reached no remote
// peer is kept for retry. A value replaced meanwhile (a newer seq) was
// queued again by the change.
func (d *DHT) putFinished(st *loopState, r putResult) {
	delete(st.inflight, r.id)
	cur, still := st.values[r.id]
	if !still || cur.seq() != r.v.seq() {
		return
	}
	switch {
	case r.err != nil:
		d.countPut("error")
	case r.stored == 0:
		d.countPut("no_peers")
	default:
		d.countPut("ok")
		d.log.Debug("dht put value", "id", r.id, "seq", r.v.seq(), "stored", r.stored)
		delete(st.failValues, r.id) // under failAll, put again at the retry
		cur.putAt = time.Now().UnixNano()
		st.values[r.id] = cur
		return
	}
	d.log.Debug("dht put value failed", "id", r.id, "stored", r.stored, "err", r.err)
	st.valueFailed(r.id)
}

// putQueue is the FIFO of values (by id) waiting for their put: urgent
// ones first. An id is queued once; an urgent push of an id waiting in the
// routine list moves it ahead.
type putQueue struct {
	urgent, routine []string
	// queued: the ids waiting, true when urgent.
	queued map[string]bool
}

func newPutQueue() putQueue { return putQueue{queued: map[string]bool{}} }

func (q *putQueue) push(k string, urgent bool) {
	if was, ok := q.queued[k]; ok && (was || !urgent) {
		return
	}
	q.queued[k] = urgent
	if urgent {
		q.urgent = append(q.urgent, k)
	} else {
		q.routine = append(q.routine, k)
	}
}

// peek returns the next key without taking it.
func (q *putQueue) peek() (string, bool) {
	for _, l := range []*[]string{&q.urgent, &q.routine} {
		for len(*l) > 0 {
			k := (*l)[0]
			urgent, ok := q.queued[k]
			if ok && urgent == (l == &q.urgent) {
				return k, true
			}
			*l = (*l)[1:] // taken already, or moved to the urgent list
		}
	}
	q.compact()
	return "", false
}

// pop takes the next key.
func (q *putQueue) pop() (string, bool) {
	k, ok := q.peek()
	if !ok {
		return "", false
	}
	delete(q.queued, k)
	if len(q.urgent) > 0 && q.urgent[0] == k {
		q.urgent = q.urgent[1:]
	} else {
		q.routine = q.routine[1:]
	}
	return k, true
}

// compact releases the lists' arrays once they are drained.
func (q *putQueue) compact() {
	if len(q.queued) == 0 {
		q.urgent, q.routine = nil, nil
		q.queued = map[string]bool{}
	}
}

func (q *putQueue) len() int { return len(q.queued) }

// routineLen is how many keys of the republish round still wait.
func (q *putQueue) routineLen() int {
	n := 0
	for _, u := range q.queued {
		if !u {
			n++
		}
	}
	return n
}

// putValue validates v, finds the closest peers of its key and sends each
// a PUT_VALUE; it returns how many stored it (they echo the record back).
func (d *DHT) putValue(ctx context.Context, id string, v value) (int, error) {
	kad, pm, err := d.running()
	if err != nil {
		return 0, err
	}
	val := v.bytes()
	// The node verified the record it hosts; the check below still binds
	// it to its key and its validity window, and kad-dht's own validation
	// of the local copy finds it verified.
	d.val.Verified.put(sha256.Sum256(val), v.rec)
	key := ValueKey(id)
	if err := d.val.Validate(key, val); err != nil {
		return 0, fmt.Errorf("own value does not validate: %w", err)
	}
	peers, err := d.small.closest(ctx, kad.RoutingTable().Size(), key, kad.GetClosestPeers)
	if err != nil && len(peers) == 0 {
		return 0, fmt.Errorf("closest peers: %w", err)
	}
	rec := lprecord.MakePutRecord(key, val)
	rec.TimeReceived = time.Now().UTC().Format(time.RFC3339Nano)
	stored := fanOut(peers, func(p peer.ID) error { return pm.PutValue(ctx, p, rec) })
	if stored < len(peers) {
		d.small.forget()
	}
	return stored, nil
}

func (d *DHT) countPut(outcome string) {
	if d.m == nil {
		return
	}
	d.m.ValuePuts.WithLabelValues(outcome).Inc()
}

func (d *DHT) countProvide(outcome string) {
	if d.m == nil {
		return
	}
	d.m.Provides.WithLabelValues(outcome).Inc()
}
