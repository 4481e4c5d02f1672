package fsutil

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFileAtomic(path, bytes.Repeat([]byte("x"), 10), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(path, 10); err != nil || len(b) != 10 {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}
	_, err := ReadFile(path, 9)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "9 bytes") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), 9); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent: %v", err)
	}
	if _, err := ReadAll(strings.NewReader("abc"), "<stdin>", 2); !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "<stdin>: ") {
		t.Fatalf("reader: %v", err)
	}
}
