package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DefaultMinFree is the free space the store keeps on its filesystem: a
// write is refused while less remains (Options.MinFreeBytes).
//
// Why a reserve and not ENOSPC: Badger writes its write-ahead log (the
// memtable's .mem file) and builds its tables through memory maps of files
// it has sized with ftruncate, which leaves them sparse. When the
// filesystem has no block left for a page the process touches, the kernel
// answers the store with SIGBUS, not an error, and the daemon dies. The
// reserve keeps enough room for what Badger may still do on its own after
// the last admitted write: flush the two memtables (8 MiB each) to level-0
// tables and compact a few 2 MiB tables, which both write before they
// delete.
//
// One more write is not the store's choice: closing Badger flushes the
// memtable to a table, through a memory map again. If another process
// takes the last free block, that flush would fault. So the guard also
// keeps a ballast file (the approach of CockroachDB's emergency ballast):
// blocks allocated at Open with fallocate, half the reserve and at most
// 32 MiB, deleted before Close when the disk is below the reserve, so the
// flush has room; it is allocated again at the next Open.
const DefaultMinFree = 64 << 20

// BallastFile is the name of the ballast inside the store's directory.
const BallastFile = "agentd-ballast"

const maxBallast = 32 << 20

// ErrNoSpace is wrapped by every write refused because the data
// directory's filesystem is below the reserve. Reads go on; writes are
// accepted again as soon as space is freed.
var ErrNoSpace = errors.New("not enough free disk space")

// SpaceError is the error of a refused write: where, how much was free and
// what the reserve is. It wraps ErrNoSpace.
type SpaceError struct {
	Dir     string
	Free    uint64
	Reserve uint64
	Err     error // the statfs error, when the free space could not be read
}

func (e *SpaceError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: cannot read the free space of %s: %v", ErrNoSpace, e.Dir, e.Err)
	}
	return fmt.Sprintf("%v: %s has %d bytes free and agentd keeps %d in reserve (storage.minFree); free some space or lower the reserve",
		ErrNoSpace, e.Dir, e.Free, e.Reserve)
}

func (e *SpaceError) Unwrap() error { return ErrNoSpace }

// Space is the state of the store's free-space guard.
type Space struct {
	// Guarded is false for an in-memory store or a reserve turned off.
	Guarded bool
	// Free is the free space (for unprivileged users) seen by the last check.
	Free uint64
	// Reserve is Options.MinFreeBytes.
	Reserve uint64
	// Full is true while writes are refused.
	Full bool
	// Refused counts the writes refused since Open.
	Refused uint64
}

// SpaceReporter is implemented by stores that guard their disk (the Badger
// store does); metrics and /healthz read it.
type SpaceReporter interface {
	Space() Space
}

// spaceGuard checks the filesystem before each write. statfs costs about a
// microsecond, far below a Badger commit, so it runs on every write: a
// cached figure would let a burst of writes run past the reserve.
type spaceGuard struct {
	dir     string
	reserve uint64
	log     *slog.Logger
	statfs  func(dir string) (uint64, error) // free bytes; tests replace it

	ballast string // path; "" when none could be allocated
	free    atomic.Uint64
	refused atomic.Uint64
	mu      sync.Mutex // orders the full/not-full transitions and their logs
	full    atomic.Bool
}

func newSpaceGuard(dir string, reserve int64, log *slog.Logger) *spaceGuard {
	if dir == "" || reserve < 0 {
		return nil
	}
	g := &spaceGuard{dir: dir, reserve: uint64(reserve), log: log, statfs: statfsFree}
	g.allocBallast(min(uint64(reserve)/2, maxBallast))
	return g
}

// allocBallast allocates the ballast file, smaller when the disk has not
// the room (down to 64 KiB, then none).
func (g *spaceGuard) allocBallast(size uint64) {
	path := filepath.Join(g.dir, BallastFile)
	for ; size >= 64<<10; size /= 2 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			g.log.Warn("no ballast file: the store cannot keep room for its last flush", "path", path, "err", err)
			return
		}
		err = unix.Fallocate(int(f.Fd()), 0, 0, int64(size)) //nolint:gosec // size <= 32 MiB
		if err == nil {
			err = f.Truncate(int64(size)) //nolint:gosec // an older, larger ballast shrinks
		}
		cerr := f.Close()
		if err == nil && cerr == nil {
			g.ballast = path
			return
		}
		if !errors.Is(err, unix.ENOSPC) {
			_ = os.Remove(path)
			g.log.Warn("no ballast file: the store cannot keep room for its last flush", "path", path, "err", errors.Join(err, cerr))
			return
		}
	}
	_ = os.Remove(path)
	g.log.Warn("no ballast file: the disk is full", "path", path)
}

// room returns how much of at most want a new file may take: a quarter of
// the space above the reserve, so a journal file never eats the room the
// reserve keeps for Badger (without a guard, want).
func (g *spaceGuard) room(want int64) int64 {
	if g == nil {
		return want
	}
	free, err := g.statfs(g.dir)
	if err != nil || free <= g.reserve {
		return 0
	}
	return min(want, int64(min((free-g.reserve)/4, 1<<62))) //nolint:gosec // bounded above
}

// beforeClose frees the ballast when the disk is below the reserve, so
// Badger's closing flush has blocks to write to.
func (g *spaceGuard) beforeClose() {
	if g == nil || g.ballast == "" {
		return
	}
	free, err := g.statfs(g.dir)
	if err == nil && free >= g.reserve {
		return
	}
	if err := os.Remove(g.ballast); err != nil {
		g.log.Warn("free the ballast before closing", "err", err)
		return
	}
	g.log.Warn("disk below the reserve: ballast freed for the store's closing flush", "free_bytes", free, "reserve_bytes", g.reserve)
}

func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil //nolint:gosec // Bsize is positive
}

// check returns nil when a write may go ahead, a *SpaceError otherwise. A
// nil guard admits everything.
func (g *spaceGuard) check() error {
	if g == nil {
		return nil
	}
	free, err := g.statfs(g.dir)
	if err == nil {
		g.free.Store(free)
	}
	ok := err == nil && free >= g.reserve
	if ok == !g.full.Load() {
		if !ok {
			g.refused.Add(1)
			return &SpaceError{Dir: g.dir, Free: free, Reserve: g.reserve, Err: err}
		}
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok && g.full.Load() {
		g.full.Store(false)
		g.log.Warn("free disk space is back above the reserve: writes are accepted again", "dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve)
	} else if !ok && !g.full.Load() {
		g.full.Store(true)
		g.log.Error("free disk space is below the reserve: writes are refused until space is freed (reads and the network go on)",
			"dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve, "err", err)
	}
	if !ok {
		g.refused.Add(1)
		return &SpaceError{Dir: g.dir, Free: free, Reserve: g.reserve, Err: err}
	}
	return nil
}

func (g *spaceGuard) space() Space {
	if g == nil {
		return Space{}
	}
	full := g.full.Load()
	if free, err := g.statfs(g.dir); err == nil {
		g.free.Store(free)
		full = free < g.reserve
	}
	return Space{Guarded: true, Free: g.free.Load(), Reserve: g.reserve, Full: full, Refused: g.refused.Load()}
}
