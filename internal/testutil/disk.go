package testutil

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of the given size ("4m") on a fresh temporary
// directory and returns it; it is unmounted at cleanup. It needs root and
// skips the test, saying so, where it cannot mount.
func MountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (environment): mounting a small tmpfs needs root; this full-disk test did not run")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP (environment): cannot mount a tmpfs (%v: %s); this full-disk test did not run", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// FillFS appends to path until its filesystem has no block left, as
// another process filling the disk would.
func FillFS(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, size := range []int{64 << 10, 512} { // big writes, then the last partial block
		buf := make([]byte, size)
		for {
			_, err := f.Write(buf)
			if err == nil {
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
}
