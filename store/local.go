package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	badger "github.com/dgraph-io/badger/v4"
)

// PutLocal durably stores a registration made on this node, replacing any
// previous one of the agent. It returns once the write is synced.
func (s *db) PutLocal(ctx context.Context, sa *record.SignedAgent) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	announce, err := announceJSON(sa)
	if err != nil {
		return err
	}
	id := sa.Agent.AgentID
	if err := checkAgentID(id); err != nil {
		return err
	}
	val := encodeEntry(entryHeader{kind: entryKindLocal, received: s.opts.Now().Round(0).UTC()}, announce)
	pin := s.heldPinValue(id) // stays held (GetPin finds it) until written
	err = s.durable(func(w *jtxn) error {
		// The record's seq joins the counter in the same transaction
		// (NextSeq does not sync).
		last, err := storedSeq(w, id)
		if err != nil {
			return err
		}
		if seq := sa.Agent.Seq; seq > last && seq <= maxCounterValue {
			if err := w.Raise(seqKey(id), seq); err != nil {
				return err
			}
		}
		if pin != nil {
			if err := w.Set(pinKey(id), pin); err != nil {
				return err
			}
		}
		return w.Set(localKey(id), val)
	})
	if err != nil {
		return fmt.Errorf("put local registration %s: %w", id, err)
	}
	if pin != nil {
		s.releaseHeldPin(id, pin)
	}
	return nil
}

// heldPin is the state of an agent id under DeferPin.
type heldPin struct {
	refs int    // DeferPin calls not yet done
	v    []byte // the latest pin PutPin got, encoded; nil when none or written
}

// DeferPin implements Store.
func (s *db) DeferPin(agentID string) (done func()) {
	s.pinMu.Lock()
	if s.heldPins == nil {
		s.heldPins = map[string]*heldPin{}
	}
	h := s.heldPins[agentID]
	if h == nil {
		h = &heldPin{}
		s.heldPins[agentID] = h
	}
	h.refs++
	s.pinMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.pinMu.Lock()
			h.refs--
			v := h.v
			if h.refs > 0 {
				v = nil // the last done writes it
			} else {
				delete(s.heldPins, agentID)
			}
			s.pinMu.Unlock()
			if v == nil {
				return
			}
			// No registration stored it (refused, or failed): written
			// as PutPin would have.
			if err := s.enter(context.Background()); err != nil {
				s.log.Warn("held pin not written: the store is closed", "agent_id", agentID)
				return
			}
			defer s.leave()
			if err := s.setJournaled(pinKey(agentID), v); err != nil {
				s.log.Error("write a held pin", "agent_id", agentID, "err", err)
			}
		})
	}
}

// heldPinValue returns the encoded pin held for agentID, if any.
func (s *db) heldPinValue(agentID string) []byte {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if h := s.heldPins[agentID]; h != nil {
		return h.v
	}
	return nil
}

// releaseHeldPin forgets a held pin that is now on disk, unless PutPin
// replaced it meanwhile.
func (s *db) releaseHeldPin(agentID string, written []byte) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if h := s.heldPins[agentID]; h != nil && bytes.Equal(h.v, written) {
		h.v = nil
	}
}

// holdPin keeps v as agentID's pin when DeferPin holds its pins, and
// reports whether it did.
func (s *db) holdPin(agentID string, v []byte) bool {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	h := s.heldPins[agentID]
	if h == nil {
		return false
	}
	h.v = v
	return true
}

// DeleteLocal removes a local registration (synced); ErrNotFound if there
// is none.
func (s *db) DeleteLocal(ctx context.Context, agentID string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	err := s.durable(func(w *jtxn) error {
		if _, err := w.Get(localKey(agentID)); err != nil {
			return err
		}
		if err := w.Delete(statusKey(agentID)); err != nil {
			return err
		}
		return w.Delete(localKey(agentID))
	})
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: no local registration of %s", ErrNotFound, agentID)
	}
	if err != nil {
		return fmt.Errorf("delete local registration %s: %w", agentID, err)
	}
	return nil
}

// Locals lists the local registrations ordered by agent id. A corrupt one
// is logged and skipped, never deleted.
func (s *db) Locals(ctx context.Context) ([]*record.SignedAgent, error) {
	var out []*record.SignedAgent
	if err := s.EachLocal(ctx, func(sa *record.SignedAgent) { out = append(out, sa) }); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *record.SignedAgent) int { return strings.Compare(a.Agent.AgentID, b.Agent.AgentID) })
	return out, nil
}

// EachLocal calls fn with every local registration, in no order, from the
// calling goroutine, while the next ones are read and decoded on the other
// cores: at start this is what a node with 100 000 hosted records waits
// for. Each core reads its own range of agent ids and decodes each value
// where Badger holds it (its value log is mapped into memory), without a
// copy; the caller's work (the live view) overlaps them. A corrupt
// registration is logged and skipped, never deleted.
//
// The records are compact (record.SignedAgent.Compact) where they can be:
// a node holds its local registrations for as long as it hosts them, and
// the bytes they were decoded from are Badger's. One that cannot be
// (signed elsewhere, with members this version does not know) keeps a
// copy of its agent object.
func (s *db) EachLocal(ctx context.Context, fn func(*record.SignedAgent)) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	ranges := localRanges(max(1, runtime.GOMAXPROCS(0)))
	out := make(chan []*record.SignedAgent, 2*len(ranges))
	errs := make([]error, len(ranges))
	var readers sync.WaitGroup
	for i, r := range ranges {
		readers.Go(func() {
			errs[i] = s.decodeLocals(ctx, r[0], r[1], out)
		})
	}
	go func() {
		readers.Wait()
		close(out)
	}()
	for batch := range out {
		for _, sa := range batch {
			fn(sa)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("list local registrations: %w", err)
	}
	return nil
}

// localRanges splits the keys of local registrations into n ranges
// [from, to) by the first hex digit of the agent id (a UUID), to nil for
// the last: together they hold every key of the space, whatever its ids.
func localRanges(n int) [][2][]byte {
	const hex = "0123456789abcdef"
	n = min(n, len(hex))
	out := make([][2][]byte, n)
	for i := range n {
		out[i][0] = []byte(spaceLocal)
		if i > 0 {
			out[i][0] = append(out[i][0], hex[i*len(hex)/n])
			out[i-1][1] = out[i][0]
		}
	}
	return out
}

// decodeLocals decodes the local registrations whose keys are in [from,
// to) (to nil: the rest of the space) and sends them to out in chunks.
func (s *db) decodeLocals(ctx context.Context, from, to []byte, out chan<- []*record.SignedAgent) error {
	const chunk = 256
	return s.bdb.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte(spaceLocal)
		o.PrefetchValues = false // decoded in place below
		it := txn.NewIterator(o)
		defer it.Close()
		batch := make([]*record.SignedAgent, 0, chunk)
		n := 0
		for it.Seek(from); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if to != nil && bytes.Compare(k, to) >= 0 {
				break
			}
			if n++; n%chunk == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			id := k[len(spaceLocal):]
			err := item.Value(func(v []byte) error {
				// v is Badger's, valid in this call only: the record
				// must not keep it.
				_, sa, err := decodeEntryFor(unsafe.String(unsafe.SliceData(id), len(id)), entryKindLocal, v, true)
				if err != nil {
					s.log.Error("skip corrupt local registration", "agent_id", fmt.Sprintf("%.64q", id), "err", err)
					return nil
				}
				if !sa.Compact() {
					sa.SetCanonical(bytes.Clone(sa.Canonical()))
				}
				batch = append(batch, sa)
				return nil
			})
			if err != nil {
				return err
			}
			if len(batch) == chunk {
				out <- batch
				batch = make([]*record.SignedAgent, 0, chunk)
			}
		}
		if len(batch) > 0 {
			out <- batch
		}
		return nil
	})
}

// NextSeq returns max(last+1, now in Unix milliseconds) for the agent and
// writes it without waiting for the disk: a seq matters once a record
// signed with it is published, and PutLocal, which stores the record
// before anything is published, writes the record's seq with it in one
// synced transaction. So a registration costs one sync, not two.
func (s *db) NextSeq(ctx context.Context, agentID string) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return 0, err
	}
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	var next uint64
	err := s.write(func(w writer) error {
		last, err := storedSeq(w, agentID)
		if err != nil {
			return err
		}
		next = last + 1
		if ms := s.opts.Now().UnixMilli(); ms > 0 && uint64(ms) > next {
			next = uint64(ms)
		}
		if next > maxCounterValue {
			return fmt.Errorf("seq of %s exhausted (%d > 2^53-1)", agentID, next)
		}
		return w.Set(seqKey(agentID), encodeU64(next), 0)
	})
	if err != nil {
		return 0, fmt.Errorf("next seq of %s: %w", agentID, err)
	}
	return next, nil
}

// PeekSeq implements Store.PeekSeq: a read, no write.
func (s *db) PeekSeq(ctx context.Context, agentID string) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return 0, err
	}
	var last uint64
	err := s.bdb.View(func(txn *badger.Txn) error {
		var err error
		last, err = storedSeq(txnWriter{txn}, agentID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("seq of %s: %w", agentID, err)
	}
	next := last + 1
	if ms := s.opts.Now().UnixMilli(); ms > 0 && uint64(ms) > next {
		next = uint64(ms)
	}
	if next > maxCounterValue {
		return 0, fmt.Errorf("seq of %s exhausted (%d > 2^53-1)", agentID, next)
	}
	return next, nil
}

// storedSeq reads an agent's seq counter (0 when there is none).
func storedSeq(w interface{ Get([]byte) ([]byte, error) }, agentID string) (uint64, error) {
	v, err := w.Get(seqKey(agentID))
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	last, err := decodeU64(v)
	if err != nil {
		// Refusing is safer than restarting below an unknown value.
		return 0, fmt.Errorf("seq counter of %s: %w", agentID, err)
	}
	return last, nil
}

// GetPin implements trust.PinStore.
func (s *db) GetPin(agentID string) (trust.Pin, bool, error) {
	if err := s.enter(context.Background()); err != nil {
		return trust.Pin{}, false, err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return trust.Pin{}, false, err
	}
	v := s.heldPinValue(agentID)
	var err error
	if v == nil {
		v, err = s.get(pinKey(agentID))
	}
	if errors.Is(err, ErrNotFound) {
		return trust.Pin{}, false, nil
	}
	if err != nil {
		return trust.Pin{}, false, fmt.Errorf("read pin of %s: %w", agentID, err)
	}
	p, err := decodePin(v)
	if err != nil {
		// A pin decides whose key an agent id is: never guess.
		return trust.Pin{}, false, fmt.Errorf("pin of %s: %w", agentID, err)
	}
	return p, true, nil
}

// PutPin implements trust.PinStore. Under DeferPin the pin is held for the
// agent's PutLocal; otherwise it is written at once, not synced.
func (s *db) PutPin(agentID string, p trust.Pin) error {
	if err := s.enter(context.Background()); err != nil {
		return err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pin: %w", err)
	}
	if len(v) > maxPinValue {
		return &record.FieldError{Field: "pin", Reason: fmt.Sprintf("is %d bytes, limit %d", len(v), maxPinValue)}
	}
	if s.holdPin(agentID, v) {
		return nil // written by the agent's PutLocal, or by DeferPin's done
	}
	// Not synced: a pin reaches the disk with the next synced write (the
	// registration that follows a local agent's pin) or memtable flush.
	// A crash can lose the pins of the last moments; those agents are
	// pinned again, first key seen, when next heard. A sync per agent
	// learned would cost a registry node a disk flush per record.
	if err := s.setJournaled(pinKey(agentID), v); err != nil {
		return fmt.Errorf("put pin of %s: %w", agentID, err)
	}
	return nil
}

// PutLease durably records the end of a local registration's lease; a
// zero until removes it (absent or not).
func (s *db) PutLease(ctx context.Context, agentID string, until time.Time) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if !until.IsZero() && (until.Before(minTime) || until.After(maxTime)) {
		return &record.FieldError{Field: "until", Reason: "must be between 1970 and 2262"}
	}
	err := s.durable(func(w *jtxn) error {
		if until.IsZero() {
			return w.Delete(leaseKey(agentID))
		}
		return w.Set(leaseKey(agentID), encodeU64(uint64(until.UnixNano())))
	})
	if err != nil {
		return fmt.Errorf("put lease of %s: %w", agentID, err)
	}
	return nil
}

// Leases returns every recorded lease. A corrupt one is logged and
// skipped.
func (s *db) Leases(ctx context.Context) (map[string]time.Time, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	out := map[string]time.Time{}
	err := s.scan(ctx, []byte(spaceLease), true, func(k, v []byte) error {
		id := string(k[len(spaceLease):])
		n, err := decodeU64(v)
		if err == nil && (n == 0 || n > math.MaxInt64 || record.ValidateAgentID(id) != nil) {
			err = fmt.Errorf("%w: lease %d", errCorrupt, n)
		}
		if err != nil {
			s.log.Error("skip corrupt lease", "agent_id", fmt.Sprintf("%.64q", id), "err", err)
			return nil
		}
		out[id] = fromUnixNano(int64(n))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// PutStatus durably records a local agent's reported status; HEALTHY (or
// empty) removes the record, absent or not.
func (s *db) PutStatus(ctx context.Context, agentID string, st record.Status) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if st != "" && !st.Valid() {
		return &record.FieldError{Field: "status", Reason: fmt.Sprintf("%.32q is not a status", string(st))}
	}
	err := s.durable(func(w *jtxn) error {
		if st == "" || st == record.StatusHealthy {
			return w.Delete(statusKey(agentID))
		}
		return w.Set(statusKey(agentID), []byte(st))
	})
	if err != nil {
		return fmt.Errorf("put status of %s: %w", agentID, err)
	}
	return nil
}

// Statuses returns every recorded status. A corrupt one is logged and
// skipped.
func (s *db) Statuses(ctx context.Context) (map[string]record.Status, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	out := map[string]record.Status{}
	err := s.scan(ctx, []byte(spaceStatus), true, func(k, v []byte) error {
		id := string(k[len(spaceStatus):])
		st := record.Status(v)
		if !st.Valid() || record.ValidateAgentID(id) != nil {
			s.log.Error("skip corrupt status", "agent_id", fmt.Sprintf("%.64q", id), "status", fmt.Sprintf("%.32q", v))
			return nil
		}
		out[id] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list statuses: %w", err)
	}
	return out, nil
}
