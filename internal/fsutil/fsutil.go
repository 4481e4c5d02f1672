// Package fsutil holds the file-system helpers more than one package needs.
package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrTooLarge is wrapped by the error of ReadFile and ReadAll for input
// longer than their limit.
var ErrTooLarge = errors.New("too large")

// ReadFile reads the file at path, at most limit bytes: a longer file is
// an error that names path and the limit and wraps ErrTooLarge, read no
// further than one byte past the limit.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	return ReadAll(f, path, limit)
}

// ReadAll is ReadFile for a reader; name stands for it in errors.
func ReadAll(r io.Reader, name string, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w (the limit is %d bytes)", name, ErrTooLarge, limit)
	}
	return b, nil
}

// WriteFileAtomic writes data to a temporary file in path's directory,
// syncs it, renames it into place and syncs the directory, so that a reader
// never sees a partial file and a crash leaves either the old content or
// the new one, never a half-written key, record or manifest.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // gone after the rename; cleans up on failure
	if err := f.Chmod(mode); err != nil {
		_ = f.Close() // the write already failed
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // the write already failed
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close() // the write already failed
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()  // best effort: not every file system syncs directories
		_ = d.Close() // read-only
	}
	return nil
}
