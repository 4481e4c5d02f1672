package e2e

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/testutil"
)

// maxExposure bounds `systemd-analyze security`'s exposure score of the
// bootstrap unit (0 = fully sandboxed, 10 = not at all; 1.2 measured with
// systemd 252). What is left is what a network service needs: sockets,
// the host's network.
const maxExposure = 2.0

// The bootstrap node's systemd unit passes `systemd-analyze verify`, and its
// sandboxing keeps the exposure score low.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		testutil.SkipEnv(t, "SKIP (environment): systemd-analyze (Debian package systemd) is not installed; the unit was not checked")
	}
	unit, err := os.ReadFile(repoFile(t, "deploy/systemd/agentd-bootstrap.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/agentd bootstrap") {
		t.Fatal("the unit no longer runs /usr/local/bin/agentd bootstrap; update this test and docs/bootstrap.md")
	}
	// verify checks that ExecStart is executable: point it at the binary
	// built for these tests.
	dir := t.TempDir()
	path := filepath.Join(dir, "agentd-bootstrap.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/agentd", agentdBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for agentd-bootstrap\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", score)
	if score > maxExposure {
		t.Fatalf("exposure %.1f > %.1f: the unit lost sandboxing\n%s", score, maxExposure, out)
	}
}

// The container image's binary (make static) is static: no interpreter, no
// shared library, so it runs FROM scratch.
func TestStaticBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentd-static")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/agentd/agentd/cmd/agentd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("the static build has a %v program header", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the static build needs %v", libs)
	}
	if out, err := exec.Command(bin, "bootstrap", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "circuit relay") {
		t.Fatalf("agentd-static bootstrap --help: %v\n%s", err, out)
	}
	// The recipe copies what `make static` builds, and the data directory.
	cf, err := os.ReadFile(repoFile(t, "deploy/container/Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(repoFile(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cf), "COPY bin/agentd-static /agentd") || !strings.Contains(string(mk), "-o $(BIN)/agentd-static") {
		t.Fatal("Containerfile and `make static` disagree on the binary's path")
	}
	if _, err := os.Stat(repoFile(t, "deploy/container/data")); err != nil {
		t.Fatalf("the Containerfile copies deploy/container/data: %v", err)
	}
}
