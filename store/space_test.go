package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
)

// Below the reserve every write is refused with ErrNoSpace, reads go on,
// and writes are accepted again once space is back; nothing acknowledged is
// lost across a reopen (issue 12 item 3).
func TestWritesRefusedBelowReserve(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var free atomic.Uint64
	free.Store(1 << 40)
	reopen := func() *db {
		s, err := open(Options{Dir: dir, MinFreeBytes: 1 << 20, Logger: testLogger(t)}, false)
		if err != nil {
			t.Fatal(err)
		}
		s.space.statfs = func(string) (uint64, error) { return free.Load(), nil }
		return s
	}
	s := reopen()
	a := mkRecord(t, agentSpec{issued: time.Now()})
	if err := s.PutLocal(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, Entry{Record: mkRecord(t, agentSpec{issued: time.Now()}), Source: SourceGossip}); err != nil {
		t.Fatal(err)
	}

	free.Store(1<<20 - 1)
	b := mkRecord(t, agentSpec{issued: time.Now()})
	err := s.PutLocal(ctx, b)
	var se *SpaceError
	if !errors.Is(err, ErrNoSpace) || !errors.As(err, &se) || se.Free != 1<<20-1 || se.Reserve != 1<<20 {
		t.Fatalf("PutLocal below the reserve: %v", err)
	}
	if !strings.Contains(err.Error(), "storage.minFree") {
		t.Fatalf("the error does not name the setting: %v", err)
	}
	if err := s.Put(ctx, Entry{Record: mkRecord(t, agentSpec{issued: time.Now()}), Source: SourceGossip}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("cache Put below the reserve: %v", err)
	}
	if _, err := s.NextSeq(ctx, b.Agent.AgentID); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("NextSeq below the reserve: %v", err)
	}
	if err := s.PutStatus(ctx, a.Agent.AgentID, record.StatusDegraded); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("PutStatus below the reserve: %v", err)
	}
	if locals, err := s.Locals(ctx); err != nil || len(locals) != 1 {
		t.Fatalf("reads while full: %d locals, %v", len(locals), err)
	}
	if sp := s.Space(); !sp.Guarded || !sp.Full || sp.Refused != 4 || sp.Reserve != 1<<20 {
		t.Fatalf("Space while full: %+v", sp)
	}

	free.Store(1 << 20)
	if err := s.PutLocal(ctx, b); err != nil {
		t.Fatalf("PutLocal once space is back: %v", err)
	}
	if sp := s.Space(); sp.Full {
		t.Fatalf("Space after recovery: %+v", sp)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	defer func() { _ = s.Close() }()
	locals, err := s.Locals(ctx)
	if err != nil || len(locals) != 2 {
		t.Fatalf("after reopen: %d locals, %v", len(locals), err)
	}
	if s.Len() != 1 {
		t.Fatalf("after reopen the cache holds %d entries, want the 1 acknowledged", s.Len())
	}
}

func TestInMemoryStoreHasNoGuard(t *testing.T) {
	s := openTest(t, "", Options{})
	if sp := s.Space(); sp.Guarded {
		t.Fatalf("in-memory store reports a guard: %+v", sp)
	}
}

// On a real filesystem that another process fills to the last block,
// Badger would touch unallocated pages of its memory-mapped files and the
// kernel would kill the process with SIGBUS (what happened before the
// guard: run this with MinFreeBytes -1 to see it). With the guard the writes
// fail cleanly, Close flushes into the freed ballast, and every
// acknowledged write is there after a reopen.
func TestFullFilesystemRefusesWritesWithoutCrashing(t *testing.T) {
	t.Run("tmpfs 4 MiB", func(t *testing.T) { fullFilesystem(t, testutil.MountTmpfs(t, "4m")) })
	t.Run("ext4 loop 12 MiB", func(t *testing.T) { fullFilesystem(t, loopExt4(t, 12<<20)) })
}

func fullFilesystem(t *testing.T, dir string) {
	ctx := context.Background()
	opts := Options{Dir: filepath.Join(dir, "db"), MinFreeBytes: 512 << 10, Logger: testLogger(t)}
	s, err := open(opts, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, BallastFile)); err != nil {
		t.Fatalf("no ballast: %v", err)
	}
	var acked []string
	put := func() error {
		var tags []string
		for i := range 16 {
			tags = append(tags, fmt.Sprintf("%03d%s", i, strings.Repeat("x", 120)))
		}
		sa := mkRecord(t, agentSpec{issued: time.Now(), tags: tags})
		err := s.PutLocal(ctx, sa)
		if err == nil {
			acked = append(acked, sa.Agent.AgentID)
		}
		return err
	}
	for range 5 {
		if err := put(); err != nil {
			t.Fatal(err)
		}
	}
	// Another process takes every block left.
	filler := filepath.Join(dir, "filler")
	testutil.FillFS(t, filler)
	for i := range 20 {
		if err := put(); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("write %d on a full disk: %v", i, err)
		}
	}
	if _, err := s.Locals(ctx); err != nil {
		t.Fatalf("read on a full disk: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := put(); err != nil {
			t.Fatalf("write after space was freed: %v", err)
		}
	}
	// Full again at Close: the ballast makes room for the flush.
	testutil.FillFS(t, filler)
	if err := s.Close(); err != nil {
		t.Fatalf("close on a full disk: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s, err = open(opts, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	locals, err := s.Locals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, sa := range locals {
		have[sa.Agent.AgentID] = true
	}
	for _, id := range acked {
		if !have[id] {
			t.Fatalf("acknowledged registration %s lost (%d of %d there)", id, len(locals), len(acked))
		}
	}
}

// loopExt4 mounts a fresh ext4 filesystem of size bytes from a loop device
// (root only, no blocks reserved for root) and returns its path.
func loopExt4(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.SkipEnv(t, "SKIP (environment): mounting a loop device needs root; the full-disk test did not run")
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		testutil.SkipEnv(t, "SKIP (environment): mkfs.ext4 (%v: %s); the full-disk test did not run", err, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		testutil.SkipEnv(t, "SKIP (environment): cannot mount a loop device (%v: %s); the full-disk test did not run", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-d", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
