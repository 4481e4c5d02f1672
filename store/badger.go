package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/record"
	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Defaults of Options (seed 001 §11.1 for the cache).
const (
	DefaultCacheTTL      = 300 * time.Second
	DefaultMaxEntries    = 1000
	DefaultStaleGrace    = time.Hour
	DefaultRefreshBefore = 60 * time.Second
	DefaultTombstoneTTL  = 24 * time.Hour
	DefaultMaxPeers      = 256
	DefaultSweepInterval = time.Second
)

// ErrExpired is returned by Put for an entry whose grace window has already
// passed (it would be dropped at once).
var ErrExpired = errors.New("entry expired beyond its grace window")

// Badger sizing. agentd's data is small (a bounded cache of records of at
// most 64 KiB, an address book, local registrations: a few, or 100 000 on a
// registry) and simnet runs 100+ stores in one process, so the tables,
// caches and worker counts are far below Badger's defaults. The memtable
// must hold the largest write batch (15 % of it): one record plus its index
// postings and the deletion of the previous version's postings.
//
// On disk, records live in Badger's value log and the LSM tree holds their
// keys and value pointers (WiscKey's separation, which Badger is built on):
// a registry's 100 000 records then make a tree of a few megabytes whose
// compactions no longer rewrite the records again and again, the stalls
// that made the last thousand of 100 000 registrations cost twice the first
// (docs/performance.md, "Records in the value log"). Small values (seq
// counters, pins, peers, postings) stay in the tree. The value log's
// garbage (records replaced, removed or expired) is collected by
// gcValueLog.
const (
	memTableSize     = 8 << 20   // disk mode
	memTableSizeMem  = 512 << 10 // in-memory mode (simnet: hundreds of stores per process, each arena allocated up front)
	numMemtables     = 2
	baseTableSize    = 2 << 20
	baseLevelSize    = 8 << 20
	numCompactors    = 2
	numL0Tables      = 3
	numL0TablesStall = 8
	blockCacheSize   = 2 << 20 // disk mode only
	valueLogFileSize = 16 << 20
	valueThreshold   = 512 // disk mode: a stored record (an announce, ≥ 0.5 KiB) goes to the value log
	// In memory there is no value log: the value threshold must stay below
	// the largest batch (15 % of the 512 KiB memtable, 76.8 KiB); 64 KiB is
	// still above any value (a record's canonical form is at most 32 KiB).
	valueThresholdMem = 64 << 10

	// The value log's garbage collection: every valueLogGCInterval, files
	// of which at least valueLogGCRatio is garbage are rewritten, at most
	// valueLogGCMaxFiles in one round (each rewrite is a burst of writes).
	valueLogGCInterval = 5 * time.Minute
	valueLogGCRatio    = 0.5
	valueLogGCMaxFiles = 4
)

// restoreMaxPending bounds the writes in flight while a snapshot loads.
const restoreMaxPending = 16

// snapshotChunk bounds one framed list of a snapshot (entries, bytes).
const (
	snapshotChunkEntries = 1000
	snapshotChunkBytes   = 1 << 20
)

// Snapshot writes the live content of s, a store of this package, to w
// in Badger's backup format (little-endian uint64 length, then a
// protobuf pb.KVList, repeated); Options.Restore loads it into a new
// store. It holds the latest version of every key that is neither
// deleted nor expired, with its expiry.
//
// It is not Badger's DB.Backup: that runs a Stream whose every worker
// allocates and zeroes a 32 MiB buffer, whatever the store's size, which
// made snapshots of simnet's small in-memory stores (taken at every
// departure) 4.5 % of a 100-node run's CPU and spikes of its memory.
// Snapshot iterates once, in one read transaction, with a buffer the size
// of what it holds.
func Snapshot(s Store, w io.Writer) error {
	d, ok := s.(*db)
	if !ok {
		return fmt.Errorf("store: snapshot of a %T", s)
	}
	if err := d.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		var (
			list pb.KVList
			size int
			buf  []byte
		)
		flush := func() error {
			if len(list.Kv) == 0 {
				return nil
			}
			var err error
			buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(proto.Size(&list)))
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, &list); err != nil {
				return err
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
			list.Kv, size = list.Kv[:0], 0
			return nil
		}
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			val, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			kv := &pb.KV{
				Key:       item.KeyCopy(nil),
				Value:     val,
				Version:   item.Version(),
				ExpiresAt: item.ExpiresAt(),
			}
			if um := item.UserMeta(); um != 0 {
				kv.UserMeta = []byte{um}
			}
			list.Kv = append(list.Kv, kv)
			size += len(kv.Key) + len(kv.Value)
			if len(list.Kv) >= snapshotChunkEntries || size >= snapshotChunkBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	}); err != nil {
		return fmt.Errorf("store: snapshot: %w", err)
	}
	return nil
}

// Open opens (or creates) the store. Dir == "" selects Badger's in-memory
// mode. The returned store owns one goroutine (expiry sweep and refresh
// hooks) until Close.
func Open(opts Options) (Store, error) {
	return open(opts, false)
}

// open is Open with the choice of Badger's SyncWrites mode (every write
// synced by Badger, so no journal), kept for the benchmarks that motivated
// the default (false: durable writes are synced through the journal, see
// db.durable).
func open(opts Options, syncWrites bool) (*db, error) {
	opts = withDefaults(opts)
	if err := validateOptions(opts); err != nil {
		return nil, err
	}
	log := opts.Logger.With("component", "store")
	bo := badger.DefaultOptions(opts.Dir).
		WithInMemory(opts.Dir == "").
		WithLogger(badgerLogger{log}).
		WithSyncWrites(syncWrites).
		WithMemTableSize(memTableSize).
		WithNumMemtables(numMemtables).
		WithBaseTableSize(baseTableSize).
		WithBaseLevelSize(baseLevelSize).
		WithNumCompactors(numCompactors).
		WithNumLevelZeroTables(numL0Tables).
		WithNumLevelZeroTablesStall(numL0TablesStall).
		WithValueLogFileSize(valueLogFileSize).
		WithValueThreshold(valueThreshold).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithMetricsEnabled(false).
		WithDetectConflicts(false).
		WithNumGoroutines(2)
	if opts.Dir != "" {
		// On disk the tables are Snappy-compressed: records are JSON, and
		// compressed tables take ~40 % less disk, less page cache (the
		// tables are memory-mapped) and fewer bytes for each compaction to
		// rewrite (docs/performance.md, "Memory per record"). Tables
		// written before keep their own format.
		bo = bo.WithBlockCacheSize(blockCacheSize).WithCompression(options.Snappy)
	} else {
		bo = bo.WithMemTableSize(memTableSizeMem).WithValueThreshold(valueThresholdMem)
	}
	bdb, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("open badger at %q: %w", opts.Dir, err)
	}
	if opts.Restore != nil {
		if err := bdb.Load(opts.Restore, restoreMaxPending); err != nil {
			return nil, errors.Join(fmt.Errorf("store: restore: %w", err), bdb.Close())
		}
	}
	s := &db{
		opts:           opts,
		log:            log,
		bdb:            bdb,
		space:          newSpaceGuard(opts.Dir, opts.MinFreeBytes, log),
		entries:        map[string]*centry{},
		counts:         map[string]int{},
		peers:          map[peer.ID]time.Time{},
		journalSegment: journalSegment,
	}
	if opts.journalSegment > 0 {
		s.journalSegment = opts.journalSegment
	}
	if err := s.checkSchema(); err != nil {
		return nil, errors.Join(err, bdb.Close())
	}
	if opts.Dir != "" && !syncWrites {
		if err := s.openJournal(); err != nil {
			return nil, errors.Join(err, bdb.Close())
		}
	}
	if err := s.load(); err != nil {
		return nil, errors.Join(err, s.closeJournal(), bdb.Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go s.run(ctx)
	return s, nil
}

func withDefaults(o Options) Options {
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.StaleGrace == 0 {
		o.StaleGrace = DefaultStaleGrace
	}
	if o.RefreshBefore == 0 {
		o.RefreshBefore = DefaultRefreshBefore
	}
	if o.TombstoneTTL == 0 {
		o.TombstoneTTL = DefaultTombstoneTTL
	}
	if o.MaxPeers == 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = DefaultMinFree
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func validateOptions(o Options) error {
	switch {
	case o.CacheTTL < 0:
		return fmt.Errorf("store option CacheTTL must be positive, got %v", o.CacheTTL)
	case o.MaxEntries < 0:
		return fmt.Errorf("store option MaxEntries must be positive, got %d", o.MaxEntries)
	case o.StaleGrace < 0:
		return fmt.Errorf("store option StaleGrace must not be negative, got %v", o.StaleGrace)
	case o.RefreshBefore < 0:
		return fmt.Errorf("store option RefreshBefore must not be negative, got %v", o.RefreshBefore)
	case o.TombstoneTTL < 0:
		return fmt.Errorf("store option TombstoneTTL must be positive, got %v", o.TombstoneTTL)
	case o.MaxPeers < 0:
		return fmt.Errorf("store option MaxPeers must be positive, got %d", o.MaxPeers)
	case o.SweepInterval < 0:
		return fmt.Errorf("store option SweepInterval must be positive, got %v", o.SweepInterval)
	}
	return nil
}

// db is the Badger-backed Store.
//
// The cache keeps, next to its Badger key spaces, an in-memory view of its
// entries (the decoded record, times, source) with an expiry-ordered heap
// and per-term posting counts. It is rebuilt from Badger at Open (at most
// MaxEntries records), so it never needs writes of its own: the heap costs
// nothing per Put where Badger keys x/<expiresAt>/<id> would add a write and
// a delete to every Put and Touch, the counts let Query pick the most
// selective index without scanning postings, and the decoded records spare
// each read a record.ParseAnnounce (about 200 µs for a typical record).
//
// Locks, in the order they are taken: mu (the in-memory view; held across
// the Badger write of a cache mutation so the two agree), then seqMu (taken
// by NextSeq only). A durable write queues under commitMu and commits
// under leadMu, then jmu; jmu alone orders every write of a key the
// journal covers (journal.go) with its entry in the journal. life guards
// Close against in-flight calls.
type db struct {
	opts  Options
	log   *slog.Logger
	bdb   *badger.DB
	space *spaceGuard // nil in memory

	mu      sync.RWMutex
	entries map[string]*centry
	expiry  expiryHeap
	counts  map[string]int // posting count per term (term.count())
	peers   map[peer.ID]time.Time

	seqMu sync.Mutex

	jmu            sync.Mutex
	journal        *journal // nil in memory, and at Open until the journal is replayed
	journalSegment int64

	pinMu    sync.Mutex
	heldPins map[string]*heldPin // DeferPin: agent id → pins held for PutLocal

	leadMu      sync.Mutex // held by the caller committing a group (durable)
	commitMu    sync.Mutex // guards commitQueue
	commitQueue []*durableReq

	hooksMu sync.Mutex
	hooks   []func(Entry)

	life      sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	sweeps    atomic.Uint64 // completed sweep rounds
}

var _ Store = (*db)(nil)
var _ SpaceReporter = (*db)(nil)

// Space reports the free-space guard (see Options.MinFreeBytes).
func (s *db) Space() Space { return s.space.space() }

// enter marks the start of a call; it fails after Close.
func (s *db) enter(ctx context.Context) error {
	s.life.RLock()
	if s.closed.Load() {
		s.life.RUnlock()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.life.RUnlock()
		return err
	}
	return nil
}

func (s *db) leave() { s.life.RUnlock() }

// Close stops the sweep goroutine, waits for calls in flight and closes
// Badger. It is idempotent. A refresh hook must not call Close.
func (s *db) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.life.Lock()
		s.closed.Store(true)
		s.life.Unlock()
		// The ballast is freed first on a full disk: the journal's last
		// sync writes Badger's dirty pages back, and they may need blocks.
		s.space.beforeClose()
		jerr := s.closeJournal()
		if err := s.bdb.Close(); err != nil {
			s.closeErr = fmt.Errorf("close badger: %w", err)
		}
		s.closeErr = errors.Join(jerr, s.closeErr)
	})
	return s.closeErr
}

// write applies fn in one unsynced Badger transaction. A batch too large for
// one transaction (a record with thousands of index terms) is split by a
// WriteBatch; the index is reconciled at Open, so a crash in between only
// costs postings that are then rebuilt.
func (s *db) write(fn func(w writer) error) error {
	if err := s.space.check(); err != nil {
		return err
	}
	err := s.bdb.Update(func(txn *badger.Txn) error { return fn(txnWriter{txn}) })
	if !errors.Is(err, badger.ErrTxnTooBig) {
		return err
	}
	wb := s.bdb.NewWriteBatch()
	defer wb.Cancel()
	if err := fn(batchWriter{wb, s}); err != nil {
		return err
	}
	return wb.Flush()
}

// durable applies fn in one transaction and returns once it is on disk:
// on disk, the transaction commits to Badger unsynced and its writes are
// appended to the journal, which is synced (journal.go); in memory it only
// commits. fn may write only keys the journal covers.
//
// Durable writes commit in groups: the caller that takes the commit lead
// applies every transaction queued meanwhile (each its own, so one that
// fails fails alone), then syncs the journal once for all of them. Alone,
// a write costs what it did; with concurrent writers (registrations from
// several clients) they share the sync instead of queueing for one each.
func (s *db) durable(fn func(w *jtxn) error) error {
	if err := s.space.check(); err != nil {
		return err
	}
	req := &durableReq{fn: fn, done: make(chan error, 1)}
	s.commitMu.Lock()
	s.commitQueue = append(s.commitQueue, req)
	s.commitMu.Unlock()
	s.leadMu.Lock()
	s.commitMu.Lock()
	batch := s.commitQueue
	s.commitQueue = nil
	s.commitMu.Unlock()
	if len(batch) > 0 {
		// This caller leads: its own request is in the batch unless an
		// earlier leader took it, in which case its answer is waiting.
		s.commitGroup(batch)
	}
	s.leadMu.Unlock()
	return <-req.done
}

type durableReq struct {
	fn   func(w *jtxn) error
	done chan error // buffered: the leader never blocks on it
}

func (s *db) commitGroup(batch []*durableReq) {
	errs := make([]error, len(batch))
	s.jmu.Lock()
	syncErr := s.journalReadyLocked()
	committed := false
	for i, r := range batch {
		if syncErr != nil {
			errs[i] = syncErr
			continue
		}
		var w jtxn
		errs[i] = s.bdb.Update(func(txn *badger.Txn) error {
			w = jtxn{txn: txn}
			return r.fn(&w)
		})
		if errs[i] == nil && s.journal != nil && len(w.ops) > 0 {
			s.journal.add(w.ops)
			committed = true
		}
	}
	if committed {
		syncErr = s.journal.write(true)
		if syncErr == nil && s.journal.full() {
			s.checkpointOrWarn()
		}
	}
	s.jmu.Unlock()
	for i, r := range batch {
		if errs[i] == nil {
			errs[i] = syncErr
		}
		r.done <- errs[i]
	}
}

// setJournaled writes k = v unsynced, journaled: the journal must hold
// every write of a key it covers, synced or not (the pins).
func (s *db) setJournaled(k, v []byte) error {
	if err := s.space.check(); err != nil {
		return err
	}
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if err := s.journalReadyLocked(); err != nil {
		return err
	}
	var w jtxn
	if err := s.bdb.Update(func(txn *badger.Txn) error {
		w = jtxn{txn: txn}
		return w.Set(k, v)
	}); err != nil || s.journal == nil {
		return err
	}
	s.journal.add(w.ops)
	if err := s.journal.write(false); err != nil {
		return err
	}
	if s.journal.full() {
		s.checkpointOrWarn()
	}
	return nil
}

// openJournal replays the journal a crash left into Badger, then
// checkpoints: Badger's files synced, a new journal file started.
func (s *db) openJournal() error {
	replayed := 0
	j, err := openJournal(s.opts.Dir, s.journalSegment, s.log, func(seq uint64, payload []byte) error {
		ops, err := decodeOps(payload)
		if err != nil {
			// Framed and checksummed, yet not an entry this store writes:
			// skipped, so one bad entry does not keep the rest out.
			s.log.Error("skip a journal entry that does not decode", "seq", seq, "err", err)
			return nil
		}
		replayed++
		return s.bdb.Update(func(txn *badger.Txn) error { return applyOps(txn, ops) })
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.jmu.Lock()
	defer s.jmu.Unlock()
	s.journal = j
	if err := s.checkpointLocked(); err != nil {
		// A full disk, say: the store opens and serves what it holds
		// (the replayed writes are in Badger, and the journal file read
		// stays until a checkpoint succeeds); durable writes try the
		// checkpoint again and fail until it does.
		j.broken = true
		s.log.Warn("journal checkpoint failed at open: durable writes are refused until one succeeds",
			"replayed", replayed, "err", err)
	}
	return nil
}

// journalReadyLocked checkpoints a broken journal (its last write or
// sync failed, or no file could be started): a new file over synced
// Badger files before it is trusted again. Called with jmu held; nil
// when there is no journal (in memory).
func (s *db) journalReadyLocked() error {
	if j := s.journal; j != nil && j.broken {
		return s.checkpointLocked()
	}
	return nil
}

// checkpointLocked syncs Badger's files, then starts a new journal file.
// Called with jmu held.
func (s *db) checkpointLocked() error {
	if err := syncBadgerFiles(s.opts.Dir); err != nil {
		s.journal.broken = true
		return fmt.Errorf("journal checkpoint: sync the store's files: %w", err)
	}
	return s.journal.start(s.space.room(s.journalSegment))
}

// checkpointOrWarn checkpoints a full journal. On failure the journal
// goes on growing past its allocation (its entries stay valid) and the
// next write tries again.
func (s *db) checkpointOrWarn() {
	if err := s.checkpointLocked(); err != nil {
		s.log.Warn("journal checkpoint failed; the journal grows until one succeeds", "err", err)
	}
}

// closeJournal syncs Badger's files and removes the journal: everything
// it holds is then in them. If the sync fails the journal stays, to be
// replayed at the next Open.
func (s *db) closeJournal() error {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	j := s.journal
	if j == nil {
		return nil
	}
	s.journal = nil
	if err := syncBadgerFiles(s.opts.Dir); err != nil {
		return errors.Join(fmt.Errorf("store: sync before close (the journal is kept): %w", err), j.close())
	}
	err := j.close()
	files, ferr := j.files()
	for _, f := range files {
		if rerr := os.Remove(filepath.Join(j.dir, f.name)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if err := errors.Join(err, ferr); err != nil {
		return fmt.Errorf("store: close journal: %w", err)
	}
	return syncDir(j.dir)
}

// writer is what cache mutations need from a transaction or a write batch.
// Get reads inside the transaction, sparing a second one (each Badger
// transaction waits for the commit watermark of the previous write).
type writer interface {
	Get(k []byte) ([]byte, error) // ErrNotFound when absent
	Set(k, v []byte, ttl time.Duration) error
	Delete(k []byte) error
}

type txnWriter struct{ txn *badger.Txn }

func (w txnWriter) Get(k []byte) ([]byte, error) {
	it, err := w.txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return it.ValueCopy(nil)
}
func (w txnWriter) Set(k, v []byte, ttl time.Duration) error {
	return w.txn.SetEntry(newEntry(k, v, ttl))
}
func (w txnWriter) Delete(k []byte) error { return w.txn.Delete(k) }

type batchWriter struct {
	wb *badger.WriteBatch
	s  *db
}

func (w batchWriter) Get(k []byte) ([]byte, error) { return w.s.get(k) }
func (w batchWriter) Set(k, v []byte, ttl time.Duration) error {
	return w.wb.SetEntry(newEntry(k, v, ttl))
}
func (w batchWriter) Delete(k []byte) error { return w.wb.Delete(k) }

// newEntry builds a Badger entry; ttl > 0 sets Badger's native TTL. Badger
// stores expiry in whole seconds, truncated, so a second is added to never
// expire early.
func newEntry(k, v []byte, ttl time.Duration) *badger.Entry {
	e := badger.NewEntry(k, v)
	if ttl > 0 {
		e = e.WithTTL(ttl + time.Second)
	}
	return e
}

// get reads one value (a copy), or ErrNotFound.
func (s *db) get(key []byte) ([]byte, error) {
	var v []byte
	err := s.bdb.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	return v, err
}

// scan calls fn for every key (and value, when values is set) under prefix.
func (s *db) scan(ctx context.Context, prefix []byte, values bool, fn func(key, val []byte) error) error {
	return s.bdb.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.PrefetchValues = values
		if values {
			o.PrefetchSize = 16
		}
		it := txn.NewIterator(o)
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%256 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			item := it.Item()
			var v []byte
			if values {
				var err error
				if v, err = item.ValueCopy(nil); err != nil {
					return err
				}
			}
			if err := fn(item.KeyCopy(nil), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkAgentID validates an agent id argument.
func checkAgentID(id string) error {
	if err := record.ValidateAgentID(id); err != nil {
		return &record.FieldError{Field: "agent_id", Reason: err.Error()}
	}
	return nil
}

// badgerLogger routes Badger's logs to slog under one static message.
// Badger's informational messages (table counts, replay progress) go to
// Debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error("badger", "detail", trimNL(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Warningf(f string, a ...any) {
	if cacheAdvice(f) {
		// Badger's cache monitor: the block cache is 2 MiB by design
		// (records are decoded in memory; the cache only serves the
		// store's own reads), so under a write load its advice to grow
		// it, every minute, is noise for an operator.
		b.l.Debug("badger", "detail", trimNL(fmt.Sprintf(f, a...)))
		return
	}
	b.l.Warn("badger", "detail", trimNL(fmt.Sprintf(f, a...)))
}

// cacheAdvice reports whether a Badger warning format is its cache
// monitor's (db.monitorCache in Badger v4).
func cacheAdvice(format string) bool {
	return strings.HasPrefix(format, "%s might be too small") || strings.HasPrefix(format, "Cache life expectancy")
}
func (b badgerLogger) Infof(f string, a ...any) {
	if b.l.Enabled(context.Background(), slog.LevelDebug) {
		b.l.Debug("badger", "detail", trimNL(fmt.Sprintf(f, a...)))
	}
}
func (b badgerLogger) Debugf(string, ...any) {}

func trimNL(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// gcValueLog rewrites the value log files of which at least
// valueLogGCRatio is garbage (records replaced, removed or expired; Badger
// learns this from its compactions), at most valueLogGCMaxFiles of them,
// and returns how many it rewrote. In-memory stores have no value log.
func (s *db) gcValueLog(ctx context.Context) int {
	if s.opts.Dir == "" || s.enter(ctx) != nil {
		return 0
	}
	defer s.leave()
	n := 0
	for ; n < valueLogGCMaxFiles && ctx.Err() == nil; n++ {
		err := s.bdb.RunValueLogGC(valueLogGCRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			break
		}
		if err != nil {
			s.log.Warn("value log garbage collection failed", "err", err)
			break
		}
	}
	if n > 0 {
		s.log.Debug("value log garbage collected", "files", n)
		// Badger moves the live records of a file into its current logs,
		// unsynced, and deletes the file: synced now, not at the next
		// journal checkpoint, those records are on disk again at once.
		if err := syncBadgerFiles(s.opts.Dir); err != nil {
			s.log.Warn("sync after value log garbage collection", "err", err)
		}
	}
	return n
}
