package skillcenter

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// installTree lists the files under dir/skills, relative, with hidden
// temporary directories included.
func installTree(t testing.TB, dataDir string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(dataDir, SkillsDir)
	_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestInstall(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	c := newTestClient(t, m.url, Options{})
	data := t.TempDir()
	in, err := Install(context.Background(), c, "skill-org-feishu", InstallOptions{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	pkg := []byte("feishu package bytes")
	sum := sha256.Sum256(pkg)
	dir := filepath.Join(data, "skills", "skill-org-feishu", "0.7.0")
	if in.Dir != dir || in.File != filepath.Join(dir, "skill-org-feishu-0.7.0.tar.gz") || in.SHA256 != hex.EncodeToString(sum[:]) ||
		in.Size != int64(len(pkg)) || in.Signer != "" || in.Already {
		t.Fatalf("installed %+v", in)
	}
	got, err := os.ReadFile(in.File)
	if err != nil || string(got) != string(pkg) {
		t.Fatalf("package %q %v", got, err)
	}
	mb, err := os.ReadFile(filepath.Join(dir, InstalledManifest))
	if err != nil {
		t.Fatal(err)
	}
	if man, err := ParseManifestJSON(mb); err != nil || man.Package.SHA256 != in.SHA256 {
		t.Fatalf("installed manifest: %v", err)
	}
	// Again: nothing written, reported as already installed.
	again, err := Install(context.Background(), c, "skill-org-feishu", InstallOptions{DataDir: data})
	if err != nil || !again.Already {
		t.Fatalf("second install: %+v %v", again, err)
	}
	if tree := installTree(t, data); len(tree) != 4 {
		t.Fatalf("tree %v", tree)
	}
	// A skill without a package cannot be installed.
	if _, err := Install(context.Background(), c, "skill-org-dingding", InstallOptions{DataDir: data}); err == nil || !strings.Contains(err.Error(), "no package") {
		t.Fatalf("no package: %v", err)
	}
	// A wrong --sha256 is refused before anything is downloaded.
	if _, err := Install(context.Background(), c, "skill-org-feishu", InstallOptions{DataDir: t.TempDir(), SHA256: strings.Repeat("ab", 32)}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong --sha256: %v", err)
	}
	if _, err := Install(context.Background(), c, "../x", InstallOptions{DataDir: data}); err == nil {
		t.Fatal("a path id was accepted")
	}
}

// corrupting serves the mirror but replaces the package bytes.
func corrupting(h http.Handler, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/download") {
			_, _ = io.WriteString(w, body)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func TestInstallCorruptDownloadLeavesNothing(t *testing.T) {
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	for _, body := range []string{
		"feishu package byteX",          // same size, other digest
		"feishu package bytes and more", // too long
		"feishu",                        // too short
	} {
		srv := httptest.NewServer(corrupting(m.s.Handler(), body))
		c := newTestClient(t, srv.URL, Options{})
		data := t.TempDir()
		_, err := Install(context.Background(), c, "skill-org-feishu", InstallOptions{DataDir: data})
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("%q: %v", body, err)
		}
		if tree := installTree(t, data); len(tree) != 0 {
			t.Fatalf("%q left %v behind", body, tree)
		}
		srv.Close()
	}
}

func TestInstallSigned(t *testing.T) {
	dir := seedCatalog(t)
	key := newKey(t)
	manPath := filepath.Join(dir, "skill-org-feishu", "manifest.json")
	raw, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := SignManifest(raw, key, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manPath, signed, 0o644); err != nil {
		t.Fatal(err)
	}
	m := newMirror(t, dir, ServerOptions{})
	c := newTestClient(t, m.url, Options{})
	ctx := context.Background()
	pinned := Anchors{Keys: []*ecdsa.PublicKey{&key.PublicKey}}
	other := Anchors{Keys: []*ecdsa.PublicKey{&newKey(t).PublicKey}}

	// Signed and anchored by a pinned key.
	in, err := Install(ctx, c, "skill-org-feishu", InstallOptions{DataDir: t.TempDir(), RequireSigned: true, Anchors: pinned})
	if err != nil || !in.Anchored || in.Signer == "" {
		t.Fatalf("pinned: %+v %v", in, err)
	}
	// Signed, no anchors: installed (integrity checked), not anchored;
	// refused when a verified signer is required.
	in, err = Install(ctx, c, "skill-org-feishu", InstallOptions{DataDir: t.TempDir()})
	if err != nil || in.Anchored || in.Signer == "" {
		t.Fatalf("unanchored: %+v %v", in, err)
	}
	if _, err := Install(ctx, c, "skill-org-feishu", InstallOptions{DataDir: t.TempDir(), RequireSigned: true}); !errors.Is(err, ErrUntrustedSigner) {
		t.Fatalf("required, unanchored: %v", err)
	}
	// Anchors that do not vouch for the signer: always refused.
	data := t.TempDir()
	if _, err := Install(ctx, c, "skill-org-feishu", InstallOptions{DataDir: data, Anchors: other}); !errors.Is(err, ErrUntrustedSigner) {
		t.Fatalf("other key: %v", err)
	}
	if tree := installTree(t, data); len(tree) != 0 {
		t.Fatalf("a refused install wrote %v", tree)
	}
	// An unsigned manifest with --require-signed.
	if _, err := Install(ctx, c, "skill-org-dingding", InstallOptions{DataDir: t.TempDir(), RequireSigned: true}); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned required: %v", err)
	}
	// A manifest altered in transit (the package digest swapped for the
	// digest of other bytes) fails the signature.
	evil := []byte("evil package bytes!!")
	sum := sha256.Sum256(evil)
	tamper := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/download") {
			_, _ = w.Write(evil)
			return
		}
		rec := httptest.NewRecorder()
		m.s.Handler().ServeHTTP(rec, r)
		body := strings.ReplaceAll(rec.Body.String(), hexSum("feishu package bytes"), hex.EncodeToString(sum[:]))
		w.WriteHeader(rec.Code)
		_, _ = io.WriteString(w, body)
	})
	srv := httptest.NewServer(tamper)
	defer srv.Close()
	c2 := newTestClient(t, srv.URL, Options{})
	if _, err := Install(ctx, c2, "skill-org-feishu", InstallOptions{DataDir: t.TempDir()}); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered manifest: %v", err)
	}
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestInstallFromPlainSkillCenter installs from a seed-001 SkillCenter that
// serves no manifest: the digest the download announces, or --sha256.
func TestInstallFromPlainSkillCenter(t *testing.T) {
	pkg := "plain package"
	var announce bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/skills/plain":
			_, _ = io.WriteString(w, `{"id":"plain","name":"Plain","version":"1.0.0","type":"tool-skill","capabilities":["c"],"scenes":[],"endpoint":"","downloadUrl":"x"}`)
		case "/api/skills/plain/download":
			if announce {
				w.Header().Set("X-Checksum-Sha256", hexSum(pkg))
			}
			_, _ = io.WriteString(w, pkg)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, Options{})
	ctx := context.Background()
	if _, err := Install(ctx, c, "plain", InstallOptions{DataDir: t.TempDir()}); !errors.Is(err, ErrNoDigest) {
		t.Fatalf("no digest anywhere: %v", err)
	}
	in, err := Install(ctx, c, "plain", InstallOptions{DataDir: t.TempDir(), SHA256: hexSum(pkg)})
	if err != nil || in.File != filepath.Join(in.Dir, "package") {
		t.Fatalf("--sha256: %+v %v", in, err)
	}
	announce = true
	if _, err := Install(ctx, c, "plain", InstallOptions{DataDir: t.TempDir()}); err != nil {
		t.Fatalf("announced digest: %v", err)
	}
	if _, err := Install(ctx, c, "plain", InstallOptions{DataDir: t.TempDir(), SHA256: hexSum("other")}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("announced and given digests disagree: %v", err)
	}
	if _, err := Install(ctx, c, "plain", InstallOptions{DataDir: t.TempDir(), RequireSigned: true}); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("no manifest, signature required: %v", err)
	}
}

func TestInstallRefusesStaleCatalog(t *testing.T) {
	clk := newClock()
	m := newMirror(t, seedCatalog(t), ServerOptions{})
	srv := httptest.NewServer(m.s.Handler())
	c := newTestClient(t, srv.URL, Options{Now: clk.Now, Retries: -1})
	if _, err := c.Get(context.Background(), "skill-org-feishu"); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	clk.Advance(301 * 1e9)
	if _, err := Install(context.Background(), c, "skill-org-feishu", InstallOptions{DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("stale catalog: %v", err)
	}
}
