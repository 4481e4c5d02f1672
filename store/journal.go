package store

// The registration journal.
//
// A durable write (a local registration, its removal, a lease, a status)
// used to commit to Badger and then call DB.Sync, which syncs two of
// Badger's logs one after the other: the value log, where the record is,
// and the memtable's write-ahead log, where its key and value pointer are.
// Two flushes to disk per registration made a registration cost more than
// an etcd put, which flushes one log (docs/performance.md, "One synced log
// per registration").
//
// Now a durable write commits to Badger unsynced, appends its operations
// to the journal and syncs the journal alone: one fdatasync of a file
// whose blocks were allocated up front. Badger's files are synced at a
// checkpoint — when a journal file is full, at Open and at Close — and
// only then is the journal started afresh, so every durable write is, at
// any moment, either in Badger's synced files or in the current journal.
// Open replays the current journal into Badger before anything reads it.
//
// The journal holds every write of the keys it covers, so replaying it is
// idempotent: registrations, leases and statuses are only written durably;
// pins are also written by PutPin, unsynced, and those writes are
// journaled (not synced) so that a replay never puts back an older pin
// over a newer one; seq counters are also raised by NextSeq, unjournaled,
// and the journal records a raise (the counter becomes the larger of the
// two), never a set.
//
// File format (integers big-endian), named agentd-<generation as 16 hex
// digits>.journal in the store's directory:
//
//	header: "agentdJ1" | generation u64 | first seq u64 | crc32c of the 24 bytes before u32 | 4 zero bytes
//	entry:  length u32 | crc32c of seq and payload u32 | seq u64 | payload (length bytes)
//	payload: operations, each one of
//	  'S' key-length uvarint | key | value-length uvarint | value   (set)
//	  'D' key-length uvarint | key                                 (delete)
//	  'M' key-length uvarint | key | u64                           (raise a counter)
//
// A length of 0 ends the entries (the rest of the file is its unwritten
// preallocation). Seqs increase from entry to entry; an entry whose crc
// does not match or whose seq does not increase ends the replay there:
// it is a write torn by a crash, never acknowledged (every acknowledged
// entry was synced, and with it every entry before it).

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

const (
	journalMagic       = "agentdJ1"
	journalHeaderSize  = 32
	journalEntryHeader = 16
	journalPrefix      = "agentd-"
	journalSuffix      = ".journal"

	// journalSegment is the size allocated for one journal file: about
	// 13 000 registrations of a typical record between checkpoints.
	journalSegment = 16 << 20

	// journalMaxEntry bounds one entry: an entry is one Badger
	// transaction's writes, and Badger refuses a transaction above 15 % of
	// the memtable (1.2 MiB); a registration (a record of at most 64 KiB
	// with its pin and seq) is far below either.
	journalMaxEntry = 4 << 20
)

// Journal operations.
const (
	opSet   = 'S'
	opDel   = 'D'
	opRaise = 'M'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journal is the open journal file. Its owner (db) serializes every call
// under db.jmu.
type journal struct {
	dir     string
	segment int64
	log     *slog.Logger

	f     *os.File
	gen   uint64
	next  uint64 // seq of the next entry
	off   int64  // where the next entry is written
	alloc int64  // bytes allocated for entries (at most segment)
	buf   []byte // entries added, not yet written

	// broken is set when a write or sync of the journal failed: what the
	// kernel did with the file's pages is then unknown, so the next
	// durable write checkpoints (syncs Badger and starts a new file)
	// before it trusts the journal again.
	broken bool
}

// journalName is the file name of a generation.
func journalName(gen uint64) string {
	return fmt.Sprintf("%s%016x%s", journalPrefix, gen, journalSuffix)
}

// parseJournalName returns the generation of a journal file name.
func parseJournalName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, journalPrefix)
	if !ok {
		return 0, false
	}
	if hex, ok = strings.CutSuffix(hex, journalSuffix); !ok || len(hex) != 16 {
		return 0, false
	}
	gen, err := strconv.ParseUint(hex, 16, 64)
	return gen, err == nil
}

func encodeJournalHeader(gen, first uint64) []byte {
	b := make([]byte, journalHeaderSize)
	copy(b, journalMagic)
	binary.BigEndian.PutUint64(b[8:], gen)
	binary.BigEndian.PutUint64(b[16:], first)
	binary.BigEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	return b
}

// decodeJournalHeader returns a header's generation and first seq.
func decodeJournalHeader(b []byte) (gen, first uint64, err error) {
	if len(b) < journalHeaderSize || string(b[:8]) != journalMagic {
		return 0, 0, fmt.Errorf("%w: not a journal header", errCorrupt)
	}
	if crc32.Checksum(b[:24], castagnoli) != binary.BigEndian.Uint32(b[24:]) {
		return 0, 0, fmt.Errorf("%w: journal header checksum", errCorrupt)
	}
	return binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:]), nil
}

// appendJournalEntry appends one framed entry.
func appendJournalEntry(b []byte, seq uint64, payload []byte) []byte {
	n := len(b)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload))) //nolint:gosec // callers keep payloads below journalMaxEntry
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[n+4:], crc32.Checksum(b[n+8:], castagnoli))
	return b
}

// scanJournal calls fn for each entry of data (a journal file after its
// header) whose seq is at least first, in order, and returns the offset
// (within data) where the entries end and why they end there (nil at a
// clean end; the caller names the offset in the file). fn's payload aliases data.
func scanJournal(data []byte, first uint64, fn func(seq uint64, payload []byte)) (end int, stop error) {
	last, started := uint64(0), false
	for off := 0; ; {
		rest := data[off:]
		if len(rest) < journalEntryHeader {
			if slices.ContainsFunc(rest, func(c byte) bool { return c != 0 }) {
				return off, errors.New("torn entry header")
			}
			return off, nil
		}
		n := binary.BigEndian.Uint32(rest)
		if n == 0 {
			return off, nil
		}
		if n > journalMaxEntry || int(n) > len(rest)-journalEntryHeader {
			return off, fmt.Errorf("an entry of %d bytes", n)
		}
		body := rest[8 : journalEntryHeader+int(n)]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(rest[4:]) {
			return off, errors.New("the entry's checksum does not match")
		}
		seq := binary.BigEndian.Uint64(body)
		if seq < first || (started && seq <= last) {
			return off, fmt.Errorf("seq %d after %d", seq, last)
		}
		fn(seq, body[8:])
		last, started = seq, true
		off += journalEntryHeader + int(n)
	}
}

// journalOp is one decoded operation of an entry.
type journalOp struct {
	op  byte
	key []byte
	val []byte // opSet
	n   uint64 // opRaise
}

// appendOp encodes one operation.
func appendOp(b []byte, op byte, key, val []byte, n uint64) []byte {
	b = append(b, op)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	switch op {
	case opSet:
		b = binary.AppendUvarint(b, uint64(len(val)))
		b = append(b, val...)
	case opRaise:
		b = binary.BigEndian.AppendUint64(b, n)
	}
	return b
}

// decodeOps decodes a payload, checking that every operation is one the
// store journals: set or delete of a local registration, pin, lease or
// status, raise of a seq counter, each of a valid agent id.
func decodeOps(p []byte) ([]journalOp, error) {
	var ops []journalOp
	for len(p) > 0 {
		o := journalOp{op: p[0]}
		p = p[1:]
		var err error
		if o.key, p, err = uvarintBytes(p); err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		space, id, ok := cutSpace(o.key)
		if !ok {
			return nil, fmt.Errorf("%w: key %.40q outside the journal's spaces", errCorrupt, o.key)
		}
		if err := checkAgentID(id); err != nil {
			return nil, fmt.Errorf("%w: key %.40q: %v", errCorrupt, o.key, err)
		}
		switch {
		case o.op == opSet && space != spaceSeq:
			if o.val, p, err = uvarintBytes(p); err != nil {
				return nil, fmt.Errorf("value: %w", err)
			}
		case o.op == opDel && space != spaceSeq:
		case o.op == opRaise && space == spaceSeq:
			if len(p) < 8 {
				return nil, fmt.Errorf("%w: truncated counter", errCorrupt)
			}
			o.n, p = binary.BigEndian.Uint64(p), p[8:]
		default:
			return nil, fmt.Errorf("%w: operation %q on %s", errCorrupt, o.op, space)
		}
		ops = append(ops, o)
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: empty entry", errCorrupt)
	}
	return ops, nil
}

// cutSpace splits a journaled key into its space and agent id.
func cutSpace(k []byte) (space, id string, ok bool) {
	for _, sp := range [...]string{spaceLocal, spacePin, spaceSeq, spaceLease, spaceStatus} {
		if rest, found := strings.CutPrefix(string(k), sp); found {
			return sp, rest, true
		}
	}
	return "", "", false
}

// uvarintBytes reads a uvarint length and that many bytes.
func uvarintBytes(p []byte) (b, rest []byte, err error) {
	n, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length", errCorrupt)
	}
	if k != len(binary.AppendUvarint(nil, n)) {
		return nil, nil, fmt.Errorf("%w: overlong length", errCorrupt)
	}
	p = p[k:]
	if n > uint64(len(p)) {
		return nil, nil, fmt.Errorf("%w: length %d beyond the entry", errCorrupt, n)
	}
	return p[:n], p[n:], nil
}

// applyOps applies decoded operations in one transaction.
func applyOps(txn *badger.Txn, ops []journalOp) error {
	for _, o := range ops {
		var err error
		switch o.op {
		case opSet:
			err = txn.Set(o.key, o.val)
		case opDel:
			err = txn.Delete(o.key)
		case opRaise:
			err = raise(txn, o.key, o.n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// raise sets the counter at k to n unless it holds more already. A counter
// that does not decode is replaced: the journaled value is a durable one.
func raise(txn *badger.Txn, k []byte, n uint64) error {
	item, err := txn.Get(k)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return err
	default:
		var cur uint64
		if err := item.Value(func(v []byte) error {
			var derr error
			cur, derr = decodeU64(v)
			return derr
		}); err == nil && cur >= n {
			return nil
		}
	}
	return txn.Set(k, encodeU64(n))
}

// jtxn is what a durable write gets: a Badger transaction whose writes are
// also recorded for the journal.
type jtxn struct {
	txn *badger.Txn
	ops []byte
}

// Get reads k in the transaction; ErrNotFound when absent.
func (w *jtxn) Get(k []byte) ([]byte, error) { return txnWriter{w.txn}.Get(k) }

func (w *jtxn) Set(k, v []byte) error {
	if err := w.txn.Set(k, v); err != nil {
		return err
	}
	w.ops = appendOp(w.ops, opSet, k, v, 0)
	return nil
}

func (w *jtxn) Delete(k []byte) error {
	if err := w.txn.Delete(k); err != nil {
		return err
	}
	w.ops = appendOp(w.ops, opDel, k, nil, 0)
	return nil
}

// Raise sets the counter at k to n unless it holds more already.
func (w *jtxn) Raise(k []byte, n uint64) error {
	if err := raise(w.txn, k, n); err != nil {
		return err
	}
	w.ops = appendOp(w.ops, opRaise, k, nil, n)
	return nil
}

// openJournal reads the newest journal file of dir (the one a crash left;
// a clean Close leaves none) and calls replay with each of its entries in
// order. It returns the journal positioned after them; the caller
// checkpoints before writing to it, which starts a generation above every
// file present and removes them all.
func openJournal(dir string, segment int64, log *slog.Logger, replay func(seq uint64, payload []byte) error) (*journal, error) {
	j := &journal{dir: dir, segment: segment, log: log}
	names, err := j.files()
	if err != nil {
		return nil, err
	}
	// The newest file with a valid header: a checkpoint writes the new
	// header and syncs it before it removes the older files, so a file
	// whose header did not reach the disk has its predecessor beside it.
	for i := len(names) - 1; i >= 0; i-- {
		path := filepath.Join(dir, names[i].name)
		data, err := os.ReadFile(path) //nolint:gosec // a file of the store's own directory
		if err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
		gen, first, herr := decodeJournalHeader(data)
		if herr != nil || gen != names[i].gen {
			log.Warn("skip a journal file with a damaged header", "path", path, "err", herr)
			continue
		}
		j.gen, j.next = gen, first
		var applyErr error
		n := 0
		end, stop := scanJournal(data[journalHeaderSize:], first, func(seq uint64, payload []byte) {
			if applyErr != nil {
				return
			}
			applyErr = replay(seq, payload)
			j.next = seq + 1
			n++
		})
		if applyErr != nil {
			return nil, fmt.Errorf("replay journal %s: %w", path, applyErr)
		}
		if stop != nil {
			log.Warn("journal ends with a torn write (never acknowledged): replay stops there",
				"path", path, "offset", journalHeaderSize+end, "reason", stop)
		}
		if n > 0 {
			log.Info("journal replayed", "path", path, "entries", n)
		}
		break
	}
	if len(names) > 0 {
		// A newer file with a damaged header is superseded too.
		j.gen = max(j.gen, names[len(names)-1].gen)
	}
	return j, nil
}

type journalFile struct {
	name string
	gen  uint64
}

// files lists the journal files of the directory, oldest first.
func (j *journal) files() ([]journalFile, error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("list journal files: %w", err)
	}
	var out []journalFile
	for _, e := range ents {
		if gen, ok := parseJournalName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, journalFile{e.Name(), gen})
		}
	}
	slices.SortFunc(out, func(a, b journalFile) int { return cmp.Compare(a.gen, b.gen) })
	return out, nil
}

// add appends an entry of ops to the buffer; write writes it.
func (j *journal) add(ops []byte) {
	j.buf = appendJournalEntry(j.buf, j.next, ops)
	j.next++
}

// full reports whether the current file's allocation is used up.
func (j *journal) full() bool {
	return j.off+int64(len(j.buf)) >= j.alloc
}

// write writes the buffered entries and, with sync, syncs the file. On
// error the entries are dropped (their seqs are not reused: a later
// entry at the same offset has a larger one, so the torn bytes of a
// failed write can never read as entries after it).
func (j *journal) write(sync bool) error {
	if len(j.buf) == 0 && !sync {
		return nil
	}
	if j.f == nil {
		j.buf = j.buf[:0]
		return errors.New("journal: no journal file (the last one could not be started)")
	}
	err := j.writeAt(j.buf)
	if err == nil && sync {
		err = unix.Fdatasync(int(j.f.Fd()))
	}
	if err != nil {
		j.broken = true
		j.buf = j.buf[:0]
		return fmt.Errorf("journal: %w", err)
	}
	j.off += int64(len(j.buf))
	j.buf = j.buf[:0]
	return nil
}

func (j *journal) writeAt(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := j.f.WriteAt(b, journalHeaderSize+j.off)
	return err
}

// start creates the next generation's file, allocates room bytes of it
// (at most a segment), writes and syncs its header, then removes the older
// files. The caller has synced every Badger file first (db.checkpoint).
func (j *journal) start(room int64) error {
	gen := j.gen + 1
	path := filepath.Join(j.dir, journalName(gen))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600) //nolint:gosec // the store's own directory
	if err != nil {
		return fmt.Errorf("create journal: %w", err)
	}
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(path)
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%w: start journal %s: %v", ErrNoSpace, path, err)
		}
		return fmt.Errorf("start journal %s: %w", path, err)
	}
	alloc, err := allocate(f, min(room, j.segment))
	if err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt(encodeJournalHeader(gen, j.next), 0); err != nil {
		return fail(err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fail(err)
	}
	if err := syncDir(j.dir); err != nil {
		return fail(err)
	}
	old, err := j.files()
	if err != nil {
		return fail(err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.gen, j.off, j.alloc, j.broken = f, gen, 0, alloc, false
	for _, o := range old {
		if o.gen < gen {
			if err := os.Remove(filepath.Join(j.dir, o.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				j.log.Warn("remove an old journal file", "name", o.name, "err", err)
			}
		}
	}
	return nil
}

// allocate allocates want bytes of a new journal file up front, so that a
// synced entry changes no file size (fdatasync then flushes the data
// alone) and a full disk shows at a checkpoint, not in a registration.
// Less room gets a smaller file (halved down to 4 KiB, then none: the
// file grows as it is written, and the next checkpoint, after 4 KiB,
// tries again). A filesystem without fallocate grows the file as it is
// written. It returns the bytes after which the journal checkpoints.
func allocate(f *os.File, want int64) (int64, error) {
	const least = 4 << 10
	for size := want; size >= least; size /= 2 {
		err := unix.Fallocate(int(f.Fd()), 0, 0, journalHeaderSize+size)
		switch {
		case err == nil:
			return size, nil
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
			return size, nil
		case !errors.Is(err, unix.ENOSPC):
			return 0, err
		}
	}
	return least, nil
}

// close closes the file; the journal is not written after.
func (j *journal) close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// syncBadgerFiles makes every write Badger holds so far durable: it syncs
// its logs — the value log files and the memtables' write-ahead logs,
// which Badger writes through memory maps and syncs only in DB.Sync, and
// then only the newest of each — and the directory. Tables are synced by
// Badger when it writes them. A log that Badger removes meanwhile has been
// flushed into a table.
func syncBadgerFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".vlog") && !strings.HasSuffix(name, ".mem") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name)) //nolint:gosec // the store's own directory
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = unix.Fdatasync(int(f.Fd()))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // the store's own directory
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
