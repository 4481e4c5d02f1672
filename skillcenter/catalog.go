package skillcenter

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
)

// MaxCatalogSkills bounds the skills of a catalog directory.
const MaxCatalogSkills = 100000

// maxLoadErrors bounds the errors one load reports.
const maxLoadErrors = 20

// ManifestNames are the file names a catalog skill directory may hold its
// manifest in (exactly one of them).
var ManifestNames = []string{"manifest.json", "manifest.yaml", "manifest.yml"}

// Entry is one skill of a catalog.
type Entry struct {
	Manifest *Manifest
	// Path is the manifest file.
	Path string
	// PackagePath is the package file ("" when the manifest has none).
	PackagePath string
	// ModTime is the package's modification time.
	ModTime time.Time
	// Signer is the manifest's signer (nil when unsigned). The signature
	// verified when the catalog was loaded; it is not anchored.
	Signer *Signer

	skill Skill // Manifest.Skill(), made once
}

// Catalog is a directory of skill manifests and packages, loaded and
// checked as a whole: DIR/<id>/manifest.json (or .yaml/.yml) for each
// skill, the directory named after the manifest's id, and the package file
// the manifest names beside it, whose size and SHA-256 must match the
// manifest. A signed manifest's signature must verify. Directories and
// files whose names start with '.' are ignored, as are plain files at the
// top level. A Catalog is immutable: reload by loading again.
type Catalog struct {
	dir      string
	entries  []*Entry // by id
	byID     map[string]*Entry
	loadedAt time.Time
}

// LoadCatalog loads and checks the catalog in dir. Every problem found is
// reported (up to 20), each naming the file and the field:
// "DIR/x/manifest.json: package.sha256: …".
func LoadCatalog(dir string) (*Catalog, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", dir, err)
	}
	c := &Catalog{dir: dir, byID: map[string]*Entry{}, loadedAt: time.Now()}
	var errs []error
	fail := func(err error) bool {
		errs = append(errs, err)
		return len(errs) >= maxLoadErrors
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !isDir(dir, de) {
			continue
		}
		if len(c.entries) >= MaxCatalogSkills {
			errs = append(errs, fmt.Errorf("catalog %s: more than %d skills", dir, MaxCatalogSkills))
			break
		}
		e, err := loadEntry(filepath.Join(dir, name), name)
		if err != nil {
			if fail(err) {
				break
			}
			continue
		}
		c.entries = append(c.entries, e)
		c.byID[e.Manifest.ID] = e
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(c.entries, func(i, j int) bool { return c.entries[i].Manifest.ID < c.entries[j].Manifest.ID })
	return c, nil
}

func isDir(dir string, de fs.DirEntry) bool {
	if de.IsDir() {
		return true
	}
	if de.Type()&fs.ModeSymlink != 0 {
		fi, err := os.Stat(filepath.Join(dir, de.Name()))
		return err == nil && fi.IsDir()
	}
	return false
}

func loadEntry(sdir, name string) (*Entry, error) {
	var found []string
	for _, mn := range ManifestNames {
		if _, err := os.Stat(filepath.Join(sdir, mn)); err == nil {
			found = append(found, mn)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s: no %s", sdir, strings.Join(ManifestNames, ", "))
	case 1:
	default:
		return nil, fmt.Errorf("%s: holds %s; keep exactly one manifest", sdir, strings.Join(found, " and "))
	}
	path := filepath.Join(sdir, found[0])
	data, err := readBounded(path, MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(path, data)
	if err != nil {
		return nil, err
	}
	locate := func(field, format string, args ...any) error {
		return &record.SourceError{File: path, Err: fieldErr(field, format, args...)}
	}
	if m.ID != name {
		return nil, locate("id", "%q is not the directory's name %q", m.ID, name)
	}
	e := &Entry{Manifest: m, Path: path, skill: m.Skill()}
	if m.Signature != nil {
		s, err := m.Verify(Anchors{})
		if err != nil {
			return nil, locate("signature", "%v", err)
		}
		e.Signer = s
	}
	if p := m.Package; p != nil {
		e.PackagePath = filepath.Join(sdir, p.File)
		f, err := os.Open(e.PackagePath)
		if err != nil {
			return nil, locate("package.file", "%v", err)
		}
		defer func() { _ = f.Close() }()
		fi, err := f.Stat()
		if err != nil {
			return nil, locate("package.file", "%v", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, locate("package.file", "%s is not a regular file", e.PackagePath)
		}
		if fi.Size() != p.Size {
			return nil, locate("package.size", "is %d; %s has %d bytes", p.Size, e.PackagePath, fi.Size())
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(f, MaxPackageBytes+1)); err != nil {
			return nil, locate("package.file", "read %s: %v", e.PackagePath, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != p.SHA256 {
			return nil, locate("package.sha256", "is %s; the SHA-256 of %s is %s", p.SHA256, e.PackagePath, sum)
		}
		e.ModTime = fi.ModTime()
	}
	return e, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	b, err := fsutil.ReadFile(path, limit)
	if errors.Is(err, fsutil.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", ErrResponseTooLarge, err)
	}
	return b, err
}

// Dir returns the catalog's directory.
func (c *Catalog) Dir() string { return c.dir }

// Len returns the number of skills.
func (c *Catalog) Len() int { return len(c.entries) }

// LoadedAt is when the catalog was loaded.
func (c *Catalog) LoadedAt() time.Time { return c.loadedAt }

// Get returns the entry of a skill id.
func (c *Catalog) Get(id string) (*Entry, bool) {
	e, ok := c.byID[id]
	return e, ok
}

// Entries returns every entry, by id.
func (c *Catalog) Entries() []*Entry { return slices.Clone(c.entries) }

// Search returns the entries matching a validated request, by id (no
// pagination: the server pages).
func (c *Catalog) Search(req SearchRequest) ([]*Entry, error) {
	q, err := compileSearch(req)
	if err != nil {
		return nil, err
	}
	var out []*Entry
	for _, e := range c.entries {
		if q.matches(e.skill) {
			out = append(out, e)
		}
	}
	return out, nil
}

// search is a compiled SearchRequest.
type search struct {
	req        SearchRequest
	keywords   []string
	constraint *semver.Constraints
}

func compileSearch(req SearchRequest) (*search, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	q := &search{req: req}
	for _, k := range req.Keywords {
		q.keywords = append(q.keywords, strings.ToLower(strings.TrimSpace(k)))
	}
	if req.Version != "" {
		c, err := semver.NewConstraint(req.Version)
		if err != nil {
			return nil, fieldErr("version", "%q is not a semver range: %v", trunc(req.Version), err)
		}
		q.constraint = c
	}
	return q, nil
}

// matches applies §7.2: every capability, one of the scenes, one of the
// types, every keyword (case-insensitive substring of the id, name,
// description, a keyword or a capability id), a version in the range.
func (q *search) matches(s Skill) bool {
	for _, c := range q.req.Capabilities {
		if !slices.Contains(s.Capabilities, c) {
			return false
		}
	}
	if len(q.req.Scenes) > 0 && !slices.ContainsFunc(q.req.Scenes, func(sc string) bool { return slices.Contains(s.Scenes, sc) }) {
		return false
	}
	if len(q.req.Types) > 0 && !slices.Contains(q.req.Types, s.Type) {
		return false
	}
	if q.constraint != nil {
		v, err := semver.NewVersion(s.Version)
		if err != nil || !q.constraint.Check(v) {
			return false
		}
	}
	for _, k := range q.keywords {
		if !skillHasKeyword(s, k) {
			return false
		}
	}
	return true
}

func skillHasKeyword(s Skill, k string) bool {
	has := func(v string) bool { return strings.Contains(strings.ToLower(v), k) }
	if has(s.ID) || has(s.Name) || has(s.Description) {
		return true
	}
	return slices.ContainsFunc(s.Keywords, has) || slices.ContainsFunc(s.Capabilities, has)
}

// Fingerprint summarises the catalog files of dir (names, sizes,
// modification times), cheaply, so a watcher can tell when to reload.
func Fingerprint(dir string) (string, error) {
	h := sha256.New()
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") || !isDir(dir, de) {
			continue
		}
		sdir := filepath.Join(dir, de.Name())
		files, err := os.ReadDir(sdir)
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if strings.HasPrefix(f.Name(), ".") {
				continue // editors' and atomic writers' temporary files
			}
			fi, err := f.Info()
			if err != nil {
				continue
			}
			_, _ = fmt.Fprintf(h, "%s/%s\x00%d\x00%d\x00", de.Name(), f.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
