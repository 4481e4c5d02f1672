package skillcenter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// SkillsDir is the directory of installed skills inside the data
// directory: <data dir>/skills/<id>/<version>/.
const SkillsDir = "skills"

// InstalledManifest is the name of the manifest an install writes beside
// the package.
const InstalledManifest = "manifest.json"

// Install errors.
var (
	// ErrDigestMismatch is returned when the downloaded package does not
	// have the expected SHA-256 or size.
	ErrDigestMismatch = errors.New("package digest mismatch")
	// ErrNoDigest is returned when nothing tells the expected digest: no
	// manifest, no package member, no announced digest, no --sha256.
	ErrNoDigest = errors.New("no digest to verify the package against")
	// ErrAlreadyInstalled is returned when the version directory exists
	// with a different package.
	ErrAlreadyInstalled = errors.New("another package is installed under this version")
)

// InstallOptions configure Install.
type InstallOptions struct {
	// DataDir is the data directory; skills go under DataDir/skills.
	DataDir string
	// RequireSigned refuses a skill whose manifest is not signed, or
	// whose signer is not anchored by Anchors.
	RequireSigned bool
	// Anchors decide whether a signer is trusted (see Anchors). With
	// anchors configured, a signed manifest whose signer they do not
	// anchor is always refused.
	Anchors Anchors
	// SHA256, when set, is the expected digest (hex); it must agree with
	// the manifest's.
	SHA256 string
	// MaxBytes bounds the package when its size is not known from a
	// manifest (default MaxPackageBytes).
	MaxBytes int64
}

// Installed describes an installed skill.
type Installed struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	// Dir is the version directory; File the package inside it.
	Dir  string `json:"dir"`
	File string `json:"file"`
	// SHA256 and Size are the verified digest and length.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Signer is the manifest signer's key fingerprint ("" when unsigned);
	// Anchored says the trust store or a trusted key vouches for it.
	Signer   string `json:"signer,omitempty"`
	Anchored bool   `json:"anchored"`
	// Already says the same package was installed before (nothing was
	// written).
	Already bool `json:"already_installed,omitempty"`
}

// Install downloads skill id through c, verifies it and writes it to
// DataDir/skills/<id>/<version>/: the package file and manifest.json (the
// catalog's manifest as served, or one made from the catalog entry). The
// expected digest comes from the manifest (package.sha256, covered by the
// signature when the manifest is signed), else the entry's package member,
// else the digest the download announces, else InstallOptions.SHA256; the
// download must match it and every other digest given. The version
// directory appears atomically (written beside it, then renamed), so a
// corrupt or interrupted download leaves nothing behind.
func Install(ctx context.Context, c *Client, id string, o InstallOptions) (_ *Installed, err error) {
	if !ValidID(id) {
		return nil, fieldErr("id", "%q is not a catalog skill id", trunc(id))
	}
	if o.DataDir == "" {
		return nil, errors.New("skillcenter: install needs a data directory")
	}
	if o.SHA256 != "" {
		o.SHA256 = strings.ToLower(o.SHA256)
		if !validSHA256(o.SHA256) {
			return nil, fieldErr("sha256", "must be 64 hex digits")
		}
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxPackageBytes
	}
	ans, err := c.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", id, err)
	}
	if ans.Stale {
		return nil, fmt.Errorf("look up %s: the catalog cannot be reached: %w", id, ans.Cause)
	}
	sk := ans.Value
	if sk.ID != id {
		return nil, fmt.Errorf("look up %s: the catalog answered skill %q", id, trunc(sk.ID))
	}
	plan, err := planInstall(sk, o)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(o.DataDir, SkillsDir, id)
	final := filepath.Join(root, plan.version)
	if done, err := alreadyInstalled(final, plan); err != nil {
		return nil, err
	} else if done {
		return plan.installed(final, true), nil
	}
	_, statErr := os.Stat(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(root, ".install-")
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = os.RemoveAll(tmp) // a no-op after the rename
		if err != nil && statErr != nil {
			_ = os.Remove(root) // made by this install; only if empty
		}
	}()

	d, err := c.Download(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", id, err)
	}
	defer func() { _ = d.Body.Close() }()
	if err := plan.agree("the announced digest (Content-Digest)", d.SHA256); err != nil {
		return nil, err
	}
	if plan.sha256 == "" {
		return nil, fmt.Errorf("%w for %s: the catalog gives no manifest or package digest and the download announces none; pass the expected SHA-256", ErrNoDigest, id)
	}
	limit := o.MaxBytes
	if plan.size >= 0 {
		limit = plan.size
	}
	if d.Size >= 0 && d.Size > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, expected at most %d", ErrDigestMismatch, id, d.Size, limit)
	}
	f, err := os.OpenFile(filepath.Join(tmp, plan.file), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(d.Body, limit+1))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", id, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	switch {
	case n > limit:
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrDigestMismatch, id, limit)
	case plan.size >= 0 && n != plan.size:
		return nil, fmt.Errorf("%w: %s has %d bytes, the manifest says %d", ErrDigestMismatch, id, n, plan.size)
	case sum != plan.sha256:
		return nil, fmt.Errorf("%w: the SHA-256 of %s is %s, expected %s (from %s)", ErrDigestMismatch, id, sum, plan.sha256, plan.digestFrom)
	}
	if err := writeSynced(filepath.Join(tmp, InstalledManifest), plan.manifest); err != nil {
		return nil, err
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if done, aerr := alreadyInstalled(final, plan); aerr != nil {
			return nil, aerr
		} else if done {
			return plan.installed(final, true), nil // a concurrent install won
		}
		return nil, fmt.Errorf("install %s: %w", id, err)
	}
	if err := syncDir(root); err != nil {
		return nil, err
	}
	plan.size = n
	return plan.installed(final, false), nil
}

// installPlan is what an install expects, decided before downloading.
type installPlan struct {
	id, version, file string
	sha256            string
	digestFrom        string
	size              int64 // -1: unknown
	manifest          []byte
	signer            *Signer
}

func (p *installPlan) installed(dir string, already bool) *Installed {
	in := &Installed{ID: p.id, Version: p.version, Dir: dir, File: filepath.Join(dir, p.file), SHA256: p.sha256, Size: p.size, Already: already}
	if p.signer != nil {
		in.Signer, in.Anchored = p.signer.Fingerprint, p.signer.Anchored
	}
	return in
}

// agree adds a digest from another source: it must equal the expected one
// (or become it when there is none yet).
func (p *installPlan) agree(from, sum string) error {
	if sum == "" {
		return nil
	}
	if p.sha256 == "" {
		p.sha256, p.digestFrom = sum, from
		return nil
	}
	if sum != p.sha256 {
		return fmt.Errorf("%w: %s says %s, %s says %s", ErrDigestMismatch, p.digestFrom, p.sha256, from, sum)
	}
	return nil
}

func planInstall(sk Skill, o InstallOptions) (*installPlan, error) {
	p := &installPlan{id: sk.ID, size: -1}
	if len(sk.Manifest) > 0 {
		m, err := ParseManifestJSON(sk.Manifest)
		if err != nil {
			return nil, fmt.Errorf("the catalog's manifest of %s: %w", sk.ID, err)
		}
		if m.ID != sk.ID || m.Version != sk.Version {
			return nil, fmt.Errorf("the catalog's manifest is %s %s, its entry %s %s", m.ID, m.Version, sk.ID, sk.Version)
		}
		switch s, err := m.Verify(o.Anchors); {
		case errors.Is(err, ErrUnsigned):
			if o.RequireSigned {
				return nil, fmt.Errorf("%w: skill %s (a signature is required)", ErrUnsigned, sk.ID)
			}
		case err != nil:
			return nil, err
		default:
			if o.RequireSigned && !s.Anchored {
				return nil, fmt.Errorf("%w: skill %s is signed by key %s, but no trust store or trusted key anchors it (a verified signer is required)", ErrUntrustedSigner, sk.ID, s.Fingerprint)
			}
			p.signer = s
		}
		if m.Package == nil {
			return nil, fmt.Errorf("skill %s has no package to install", sk.ID)
		}
		p.version, p.file, p.size = m.Version, m.Package.File, m.Package.Size
		p.sha256, p.digestFrom = m.Package.SHA256, "the manifest"
		p.manifest = append(indentJSON(m.Canonical()), '\n')
	} else {
		if o.RequireSigned {
			return nil, fmt.Errorf("%w: the catalog serves no manifest for %s (a signature is required)", ErrUnsigned, sk.ID)
		}
		if err := sk.Validate(); err != nil {
			return nil, fmt.Errorf("the catalog's entry of %s: %w", sk.ID, err)
		}
		p.version, p.file = sk.Version, "package"
		if sk.Package != nil {
			p.file, p.size = sk.Package.File, sk.Package.Size
			p.sha256, p.digestFrom = sk.Package.SHA256, "the catalog entry"
		}
		entry := sk
		entry.DownloadURL, entry.Manifest = "", nil
		b, err := json.MarshalIndent(entry, "", "  ")
		if err != nil {
			return nil, err
		}
		p.manifest = append(b, '\n')
	}
	if _, err := semver.StrictNewVersion(p.version); err != nil || strings.ContainsAny(p.version, `/\`) {
		return nil, fieldErr("version", "%q is not a semantic version", trunc(p.version))
	}
	if err := p.agree("--sha256", o.SHA256); err != nil {
		return nil, err
	}
	return p, nil
}

// alreadyInstalled reports whether final holds the planned package: the
// same file with the expected digest. A different package there is
// ErrAlreadyInstalled.
func alreadyInstalled(final string, p *installPlan) (bool, error) {
	if _, err := os.Stat(final); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if p.sha256 == "" {
		return false, fmt.Errorf("%w: %s exists", ErrAlreadyInstalled, final)
	}
	f, err := os.Open(filepath.Join(final, p.file))
	if err != nil {
		return false, fmt.Errorf("%w: %s exists without %s", ErrAlreadyInstalled, final, p.file)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return false, err
	}
	if hex.EncodeToString(h.Sum(nil)) != p.sha256 {
		return false, fmt.Errorf("%w: %s holds another %s; remove it to reinstall", ErrAlreadyInstalled, final, p.file)
	}
	p.size = n
	return true, nil
}

func indentJSON(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return b
	}
	return out.Bytes()
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
