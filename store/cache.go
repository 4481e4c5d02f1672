package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/record"
	badger "github.com/dgraph-io/badger/v4"
)

// centry is the in-memory view of one cache entry. A new centry replaces
// the old one on every Put and Touch (gen grows), so a pointer taken under
// mu.RLock can be read without the lock; only hidx and fired change in
// place, under mu.
type centry struct {
	id       string
	rec      *record.SignedAgent
	terms    []term // termsOf(&rec.Agent)
	source   Source
	received time.Time
	expires  time.Time
	gen      uint64 // version of the entry: bumped by Put and Touch
	fired    uint64 // gen for which the refresh hooks ran
	hidx     int    // position in the expiry heap
}

func (c *centry) entry(now time.Time) Entry {
	return Entry{Record: c.rec, Source: c.source, ReceivedAt: c.received, ExpiresAt: c.expires, Stale: !now.Before(c.expires)}
}

// expiryHeap orders entries by ExpiresAt (then agent id): its root is the
// entry that expires soonest, the first to evict and to drop.
type expiryHeap []*centry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if !h[i].expires.Equal(h[j].expires) {
		return h[i].expires.Before(h[j].expires)
	}
	return h[i].id < h[j].id
}
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = i
	h[j].hidx = j
}
func (h *expiryHeap) Push(x any) {
	c := x.(*centry)
	c.hidx = len(*h)
	*h = append(*h, c)
}
func (h *expiryHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.hidx = -1
	return c
}

// dropAt is when an entry leaves the cache: its grace window ends.
func (s *db) dropAt(c *centry) time.Time { return c.expires.Add(s.opts.StaleGrace) }

// ttl is the Badger TTL of an entry's keys: the time left until dropAt.
func (s *db) ttl(c *centry, now time.Time) time.Duration { return s.dropAt(c).Sub(now) }

// insertLocked adds c to the view (c.id must be absent).
func (s *db) insertLocked(c *centry) {
	s.entries[c.id] = c
	heap.Push(&s.expiry, c)
	for _, t := range c.terms {
		s.counts[t.count()]++
	}
}

// removeLocked removes c from the view.
func (s *db) removeLocked(c *centry) {
	delete(s.entries, c.id)
	if c.hidx >= 0 {
		heap.Remove(&s.expiry, c.hidx)
	}
	for _, t := range c.terms {
		k := t.count()
		if s.counts[k]--; s.counts[k] <= 0 {
			delete(s.counts, k)
		}
	}
}

// replaceLocked swaps old for c in the view. The record may change.
func (s *db) replaceLocked(old, c *centry) {
	if old.rec == c.rec {
		s.entries[c.id] = c
		c.hidx = old.hidx
		s.expiry[c.hidx] = c
		old.hidx = -1
		heap.Fix(&s.expiry, c.hidx)
		return
	}
	s.removeLocked(old)
	s.insertLocked(c)
}

// writeEntry writes c's value and postings with c's TTL, and deletes the
// postings of old (the previous version, may be nil) that c no longer has.
func writeEntry(w writer, c, old *centry, ttl time.Duration, announce []byte) error {
	val := encodeEntry(entryHeader{kind: entryKindCache, received: c.received, expires: c.expires, source: c.source}, announce)
	if err := w.Set(cacheKey(c.id), val, ttl); err != nil {
		return err
	}
	ts := c.terms
	if old != nil && old.rec != c.rec {
		keep := make(map[term]bool, len(ts))
		for _, t := range ts {
			keep[t] = true
		}
		for _, t := range old.terms {
			if !keep[t] {
				if err := w.Delete(t.key(c.id)); err != nil {
					return err
				}
			}
		}
	}
	for _, t := range ts {
		if err := w.Set(t.key(c.id), nil, ttl); err != nil {
			return err
		}
	}
	return nil
}

// deleteEntry deletes c's value and postings.
func deleteEntry(w writer, c *centry) error {
	if err := w.Delete(cacheKey(c.id)); err != nil {
		return err
	}
	for _, t := range c.terms {
		if err := w.Delete(t.key(c.id)); err != nil {
			return err
		}
	}
	return nil
}

// dropLocked deletes the given entries from Badger and the view.
func (s *db) dropLocked(cs []*centry) error {
	if len(cs) == 0 {
		return nil
	}
	for _, c := range cs {
		s.removeLocked(c)
	}
	err := s.write(func(w writer) error {
		for _, c := range cs {
			if err := deleteEntry(w, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// Badger's TTL removes them anyway; the view is already right.
		s.warnWrite("drop cache entries", len(cs), err)
	}
	return err
}

// warnWrite logs a failed deletion of cache keys. While the disk is full
// the sweep would log it every second; the guard has logged the state once.
func (s *db) warnWrite(what string, n int, err error) {
	if errors.Is(err, ErrNoSpace) {
		s.log.Debug(what, "count", n, "err", err)
		return
	}
	s.log.Warn(what, "count", n, "err", err)
}

// purgeLocked drops the entries whose grace window has passed.
func (s *db) purgeLocked(now time.Time) {
	var gone []*centry
	for len(s.expiry) > 0 && !now.Before(s.dropAt(s.expiry[0])) {
		c := s.expiry[0]
		gone = append(gone, c)
		s.removeLocked(c)
	}
	if len(gone) == 0 {
		return
	}
	// removeLocked already took them out of the view; delete the keys.
	if err := s.write(func(w writer) error {
		for _, c := range gone {
			if err := deleteEntry(w, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		s.warnWrite("drop expired cache entries", len(gone), err)
	}
}

// evictLocked evicts the entries that expire soonest until the cache holds
// at most MaxEntries.
func (s *db) evictLocked() {
	var victims []*centry
	for len(s.entries) > s.opts.MaxEntries {
		c := s.expiry[0]
		victims = append(victims, c)
		s.removeLocked(c)
	}
	if len(victims) == 0 {
		return
	}
	if err := s.write(func(w writer) error {
		for _, c := range victims {
			if err := deleteEntry(w, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		s.warnWrite("evict cache entries", len(victims), err)
	}
	s.log.Debug("evicted cache entries", "count", len(victims), "max_entries", s.opts.MaxEntries)
}

// Put caches a remote record (see Store.Put). ExpiresAt is computed as the
// earlier of the record's issued_at+ttl and ReceivedAt+CacheTTL; a non-zero
// e.ExpiresAt can only make it earlier. A zero ReceivedAt means now. An
// entry already past its grace window is refused with ErrExpired.
func (s *db) Put(ctx context.Context, e Entry) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if e.Record == nil {
		return &record.FieldError{Field: "record", Reason: "is required"}
	}
	id := e.Record.Agent.AgentID
	if err := checkAgentID(id); err != nil {
		return err
	}
	if !e.Source.valid() {
		return &record.FieldError{Field: "source", Reason: fmt.Sprintf("%.32q is not a known source", e.Source)}
	}
	if err := checkCanonical(e.Record.Canonical()); err != nil {
		return err
	}
	now := s.opts.Now()
	c := &centry{id: id, rec: e.Record, source: e.Source, received: e.ReceivedAt, hidx: -1}
	if c.received.IsZero() {
		c.received = now
	}
	c.received = c.received.Round(0).UTC()
	if c.received.Before(minTime) || c.received.After(maxTime.Add(-s.opts.CacheTTL)) {
		return &record.FieldError{Field: "received_at", Reason: "is out of range"}
	}
	c.expires = c.received.Add(s.opts.CacheTTL)
	if re := e.Record.Agent.ExpiresAt(); re.Before(c.expires) {
		c.expires = re
	}
	if !e.ExpiresAt.IsZero() && e.ExpiresAt.Before(c.expires) {
		c.expires = e.ExpiresAt
	}
	c.expires = c.expires.Round(0).UTC()
	if !now.Before(s.dropAt(c)) {
		return fmt.Errorf("%w: agent %s expired at %s", ErrExpired, id, c.expires.Format(time.RFC3339))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	old := s.entries[id]
	if old != nil {
		switch stored, put := old.rec.Agent.Seq, e.Record.Agent.Seq; {
		case stored > put && (!old.rec.Unbound() || e.Record.Unbound()):
			// (A bound record replaces an unbound one whatever their
			// seqs: the unbound one's was stamped where it was received.)
			return fmt.Errorf("%w: agent %s stored seq %d, put seq %d", ErrOlder, id, stored, put)
		case stored == put:
			// Same version: keep the record first seen, refresh the rest.
			c.rec, c.terms = old.rec, old.terms
		}
		c.gen = old.gen + 1
	} else {
		c.gen = 1
	}
	if c.terms == nil {
		c.terms = termsOf(&c.rec.Agent)
	}
	announce, err := announceJSON(c.rec)
	if err != nil {
		return err
	}
	err = s.write(func(w writer) error {
		if t, ok, err := s.tombstoneIn(w, id, now); err != nil {
			return err
		} else if ok && t.Seq >= e.Record.Agent.Seq {
			return fmt.Errorf("%w: agent %s at seq %d (record seq %d)", ErrTombstoned, id, t.Seq, e.Record.Agent.Seq)
		}
		return writeEntry(w, c, old, s.ttl(c, now), announce)
	})
	if errors.Is(err, ErrTombstoned) {
		return err
	}
	if err != nil {
		return fmt.Errorf("put agent %s: %w", id, err)
	}
	if old != nil {
		s.replaceLocked(old, c)
	} else {
		s.insertLocked(c)
	}
	s.evictLocked()
	return nil
}

// Get returns the cached entry of an agent, fresh or stale.
func (s *db) Get(ctx context.Context, agentID string) (Entry, error) {
	if err := s.enter(ctx); err != nil {
		return Entry{}, err
	}
	defer s.leave()
	now := s.opts.Now()
	s.mu.RLock()
	c := s.entries[agentID]
	s.mu.RUnlock()
	if c == nil || !now.Before(s.dropAt(c)) {
		return Entry{}, fmt.Errorf("%w: agent %.64s is not cached", ErrNotFound, agentID)
	}
	return c.entry(now), nil
}

// Touch sets a fresh entry's ExpiresAt, clamped to [now, now+CacheTTL]:
// a heartbeat extends the entry, and a time at or before now makes it
// stale at once (the live view does so for an agent that stopped beating).
// An unchanged time writes nothing. A stale entry is not revived: Touch
// returns ErrNotFound and the caller fetches the record again.
func (s *db) Touch(ctx context.Context, agentID string, expiresAt time.Time) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	old := s.entries[agentID]
	if old == nil {
		return fmt.Errorf("%w: agent %.64s is not cached", ErrNotFound, agentID)
	}
	if !now.Before(old.expires) {
		return fmt.Errorf("%w: the entry of agent %s is stale", ErrNotFound, agentID)
	}
	if limit := now.Add(s.opts.CacheTTL); expiresAt.After(limit) {
		expiresAt = limit
	}
	if expiresAt.Before(now) {
		expiresAt = now
	}
	expiresAt = expiresAt.Round(0).UTC()
	if expiresAt.Equal(old.expires) {
		return nil
	}
	c := *old
	c.expires = expiresAt
	c.gen++
	announce, err := announceJSON(c.rec)
	if err != nil {
		return err
	}
	if err := s.write(func(w writer) error { return writeEntry(w, &c, old, s.ttl(&c, now), announce) }); err != nil {
		return fmt.Errorf("touch agent %s: %w", agentID, err)
	}
	s.replaceLocked(old, &c)
	return nil
}

// Delete removes a cached entry; ErrNotFound if there is none.
func (s *db) Delete(ctx context.Context, agentID string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(s.opts.Now())
	c := s.entries[agentID]
	if c == nil {
		return fmt.Errorf("%w: agent %.64s is not cached", ErrNotFound, agentID)
	}
	if err := s.dropLocked([]*centry{c}); err != nil {
		return fmt.Errorf("delete agent %s: %w", agentID, err)
	}
	return nil
}

// Len returns the number of cached entries inside their grace window.
func (s *db) Len() int {
	if s.enter(context.Background()) != nil {
		return 0
	}
	defer s.leave()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(s.opts.Now())
	return len(s.entries)
}

// PutTombstone records an unregistration (kept TombstoneTTL from t.At, a
// zero At meaning now) and deletes the cached entry if its seq is not
// newer. A stored tombstone with a higher seq is kept.
func (s *db) PutTombstone(ctx context.Context, t Tombstone) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := validateTombstone(t); err != nil {
		return err
	}
	now := s.opts.Now()
	if t.At.IsZero() {
		t.At = now
	}
	t.At = t.At.Round(0).UTC()
	ttl := t.At.Add(s.opts.TombstoneTTL).Sub(now)

	val, err := encodeTombstone(t)
	if err != nil {
		return fmt.Errorf("encode tombstone: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	var victim *centry
	if c := s.entries[t.AgentID]; c != nil && c.rec.Agent.Seq <= t.Seq {
		victim = c
	}
	err = s.write(func(w writer) error {
		cur, ok, err := s.tombstoneIn(w, t.AgentID, now)
		if err != nil {
			return err
		}
		if ttl > 0 && (!ok || cur.Seq < t.Seq) {
			if err := w.Set(tombKey(t.AgentID), val, ttl); err != nil {
				return err
			}
		}
		if victim != nil {
			return deleteEntry(w, victim)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put tombstone of %s: %w", t.AgentID, err)
	}
	if victim != nil {
		s.removeLocked(victim)
	}
	return nil
}

// GetTombstone returns the tombstone of an agent, if one is in force.
func (s *db) GetTombstone(ctx context.Context, agentID string) (Tombstone, bool, error) {
	if err := s.enter(ctx); err != nil {
		return Tombstone{}, false, err
	}
	defer s.leave()
	return s.tombstoneIn(readerFunc(s.get), agentID, s.opts.Now())
}

// reader reads one key (ErrNotFound when absent).
type reader interface {
	Get(k []byte) ([]byte, error)
}

type readerFunc func(k []byte) ([]byte, error)

func (f readerFunc) Get(k []byte) ([]byte, error) { return f(k) }

// tombstoneIn reads a tombstone through r; expired or corrupt ones count
// as absent.
func (s *db) tombstoneIn(r reader, id string, now time.Time) (Tombstone, bool, error) {
	if len(id) != agentIDLen {
		return Tombstone{}, false, nil
	}
	v, err := r.Get(tombKey(id))
	if errors.Is(err, ErrNotFound) {
		return Tombstone{}, false, nil
	}
	if err != nil {
		return Tombstone{}, false, fmt.Errorf("read tombstone of %s: %w", id, err)
	}
	t, err := decodeTombstone(id, v)
	if err != nil {
		s.log.Warn("skip corrupt tombstone", "agent_id", id, "err", err)
		return Tombstone{}, false, nil
	}
	if !now.Before(t.At.Add(s.opts.TombstoneTTL)) {
		return Tombstone{}, false, nil
	}
	return t, true, nil
}

// OnRefresh registers a refresh hook. Hooks run on the store's goroutine,
// without any store lock held; they may call the store (but not Close).
func (s *db) OnRefresh(fn func(Entry)) {
	if fn == nil {
		return
	}
	s.hooksMu.Lock()
	s.hooks = append(s.hooks, fn)
	s.hooksMu.Unlock()
}

// run is the store's goroutine: every SweepInterval it drops entries past
// their grace window and fires the refresh hooks.
func (s *db) run(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	var gc <-chan time.Time
	if s.opts.Dir != "" {
		gt := time.NewTicker(valueLogGCInterval)
		defer gt.Stop()
		gc = gt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx)
		case <-gc:
			s.gcValueLog(ctx)
		}
	}
}

// sweep runs one round of the background work.
func (s *db) sweep(ctx context.Context) {
	if s.enter(ctx) != nil {
		return
	}
	defer s.sweeps.Add(1)
	now := s.opts.Now()
	s.mu.Lock()
	s.purgeLocked(now)
	due := s.dueLocked(now)
	fresh, stale := 0, 0
	for _, c := range s.entries {
		if now.Before(c.expires) {
			fresh++
		} else {
			stale++
		}
	}
	s.mu.Unlock()
	s.leave()
	if m := s.opts.Metrics; m != nil {
		m.Records.WithLabelValues("fresh").Set(float64(fresh))
		m.Records.WithLabelValues("stale").Set(float64(stale))
	}
	if len(due) == 0 {
		return
	}
	s.hooksMu.Lock()
	hooks := append([]func(Entry){}, s.hooks...)
	s.hooksMu.Unlock()
	for _, e := range due {
		if ctx.Err() != nil {
			return
		}
		for _, h := range hooks {
			h(e)
		}
	}
}

// dueLocked returns the fresh entries inside their refresh window whose
// hooks have not run for their current version, and marks them as run.
// It walks the heap from the root and prunes subtrees that expire after
// now+RefreshBefore.
func (s *db) dueLocked(now time.Time) []Entry {
	limit := now.Add(s.opts.RefreshBefore)
	var due []Entry
	var walk func(i int)
	walk = func(i int) {
		if i >= len(s.expiry) {
			return
		}
		c := s.expiry[i]
		if c.expires.After(limit) {
			return
		}
		if now.Before(c.expires) && c.fired != c.gen {
			c.fired = c.gen
			due = append(due, c.entry(now))
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return due
}

// load rebuilds the in-memory view from Badger: the schema check, the cache
// entries (corrupt or expired ones deleted), the index (missing postings
// written, orphans deleted) and the address book.
func (s *db) load() error {
	ctx := context.Background()
	now := s.opts.Now()
	var bad [][]byte
	err := s.scan(ctx, []byte(spaceCache), true, func(k, v []byte) error {
		id := string(k[len(spaceCache):])
		h, sa, err := decodeEntryFor(id, entryKindCache, v, false)
		if err != nil {
			s.log.Warn("skip corrupt cache entry", "agent_id", fmt.Sprintf("%.64q", id), "err", err)
			bad = append(bad, k)
			return nil
		}
		c := &centry{id: id, rec: sa, terms: termsOf(&sa.Agent), source: h.source, received: h.received, expires: h.expires, gen: 1, hidx: -1}
		if !now.Before(s.dropAt(c)) {
			bad = append(bad, k)
			return nil
		}
		s.insertLocked(c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("load cache: %w", err)
	}
	// Postings: keep the expected ones, delete the rest, write the missing.
	want := map[string]time.Duration{}
	for _, c := range s.entries {
		for _, t := range c.terms {
			want[string(t.key(c.id))] = s.ttl(c, now)
		}
	}
	err = s.scan(ctx, []byte(spaceIndex), false, func(k, _ []byte) error {
		if _, ok := want[string(k)]; ok {
			delete(want, string(k))
			return nil
		}
		bad = append(bad, k)
		return nil
	})
	if err != nil {
		return fmt.Errorf("load index: %w", err)
	}
	if len(bad) > 0 || len(want) > 0 {
		s.log.Info("repair cache index", "deleted", len(bad), "added", len(want))
		if err := s.write(func(w writer) error {
			for _, k := range bad {
				if err := w.Delete(k); err != nil {
					return err
				}
			}
			for k, ttl := range want {
				if err := w.Set([]byte(k), nil, ttl); err != nil {
					return err
				}
			}
			return nil
		}); errors.Is(err, ErrNoSpace) {
			// The postings are repaired at the next Open; a full disk
			// must not keep the node from serving what it holds.
			s.log.Warn("repair cache index postponed", "err", err)
		} else if err != nil {
			return fmt.Errorf("repair cache index: %w", err)
		}
	}
	s.evictLocked()
	return s.loadPeers(ctx)
}

// checkSchema writes the schema version of a new store and refuses a store
// written by an incompatible version.
func (s *db) checkSchema() error {
	v, err := s.get([]byte(spaceSchema))
	if errors.Is(err, ErrNotFound) {
		empty := true
		if err := s.bdb.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{})
			defer it.Close()
			it.Rewind()
			empty = !it.Valid()
			return nil
		}); err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("store at %q holds data but no schema version: not an agentd store", s.opts.Dir)
		}
		// Synced at once: the journal covers registrations, not this.
		if err := s.bdb.Update(func(txn *badger.Txn) error { return txn.Set([]byte(spaceSchema), encodeU64(schemaVersion)) }); err != nil {
			return err
		}
		return s.bdb.Sync()
	}
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	n, err := decodeU64(v)
	if err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if n != schemaVersion {
		return fmt.Errorf("store at %q has schema version %d, this agentd reads %d", s.opts.Dir, n, schemaVersion)
	}
	return nil
}
