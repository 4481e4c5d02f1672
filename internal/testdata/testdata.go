// Package testdata locates the conformance suites kept outside the
// repository (../shared/testdata: RFC 8785 vectors, x509-limbo, libp2p
// vectors). Tests use them in place; they are never copied into the repo.
//
// The directory is found from $AGENTD_SHARED_TESTDATA, else by walking up
// from the working directory looking for shared/testdata, else at
// /work/shared/testdata. A test that needs it and cannot find it fails
// loudly instead of passing silently.
package testdata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the shared testdata directory or fails the test.
func Dir(t testing.TB) string {
	t.Helper()
	d, ok := Find()
	if !ok {
		t.Fatalf("shared conformance testdata not found: set AGENTD_SHARED_TESTDATA to the directory holding jcs/, x509/ and libp2p/ (normally ../shared/testdata next to the repository)")
	}
	return d
}

// Path joins elems under Dir.
func Path(t testing.TB, elems ...string) string {
	t.Helper()
	return filepath.Join(append([]string{Dir(t)}, elems...)...)
}

// Find returns the directory and whether it exists.
func Find() (string, bool) {
	if d := os.Getenv("AGENTD_SHARED_TESTDATA"); d != "" {
		return d, isDir(d)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			c := filepath.Join(d, "shared", "testdata")
			if isDir(c) {
				return c, true
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	const fallback = "/work/shared/testdata"
	return fallback, isDir(fallback)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
