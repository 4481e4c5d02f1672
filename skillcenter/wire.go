package skillcenter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/record"
)

// Limits of the SkillCenter wire shapes.
const (
	// MaxResponseBytes bounds a JSON answer the client reads (default of
	// Options.MaxResponseBytes).
	MaxResponseBytes = 8 << 20
	// MaxSkillsPerAnswer bounds the skills of one §7.3 answer.
	MaxSkillsPerAnswer = 10000
	// MaxSearchBytes bounds a §7.2 search request body.
	MaxSearchBytes = 64 << 10
	// MaxKeywords bounds the keywords of a search and of a manifest.
	MaxKeywords = record.MaxTags
	// MaxManifestBytes bounds a manifest (file or JSON member).
	MaxManifestBytes = 64 << 10
)

// Skill is one skill in the SkillCenter shape (seed 001 §7.3): id, name,
// version, type, capabilities, scenes, endpoint and downloadUrl. The other
// members are extensions a seed-001 SkillCenter does not send and a
// seed-001 client ignores: agentd's API adds agentId, status and source;
// the agentd mirror adds description, keywords, package and, on
// GET /api/skills/{id}, the signed manifest.
type Skill struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Version      string   `json:"version"`
	Type         string   `json:"type"`
	Capabilities []string `json:"capabilities"`
	Scenes       []string `json:"scenes"`
	Endpoint     string   `json:"endpoint"`
	DownloadURL  string   `json:"downloadUrl,omitempty"`

	Description string          `json:"description,omitempty"`
	Keywords    []string        `json:"keywords,omitempty"`
	AgentID     string          `json:"agentId,omitempty"`
	Status      string          `json:"status,omitempty"`
	Source      string          `json:"source,omitempty"`
	Package     *Package        `json:"package,omitempty"`
	Manifest    json.RawMessage `json:"manifest,omitempty"`
}

// Package describes the file GET /api/skills/{id}/download serves.
type Package struct {
	// File is the file name (no directory).
	File string `json:"file"`
	// SHA256 is the lowercase hex SHA-256 of the file.
	SHA256 string `json:"sha256"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
}

// SkillList is the answer of GET /api/skills and POST /api/skills/search
// (seed 001 §7.3). Total is the number of skills that matched; the agentd
// mirror pages (limit, offset), so Total may exceed len(Skills).
type SkillList struct {
	Total  int     `json:"total"`
	Skills []Skill `json:"skills"`
}

// SearchRequest is the body of POST /api/skills/search (seed 001 §7.2). A
// skill matches when it has every capability, one of the scenes (if any),
// one of the types (if any), every keyword (case-insensitive substring of
// its id, name, description, keywords or capability ids) and a version
// inside the semver range. Limit and Offset are agentd mirror extensions
// (pagination); a seed-001 SkillCenter ignores them.
type SearchRequest struct {
	Capabilities []string `json:"capabilities,omitempty"`
	Scenes       []string `json:"scenes,omitempty"`
	Types        []string `json:"types,omitempty"`
	Keywords     []string `json:"keywords,omitempty"`
	Version      string   `json:"version,omitempty"`
	Limit        int      `json:"limit,omitempty"`
	Offset       int      `json:"offset,omitempty"`
}

// Validate checks a search request against the limits the mirror and
// agentd's API enforce, naming the offending field.
func (r *SearchRequest) Validate() error {
	if err := checkIdents("capabilities", r.Capabilities, record.MaxCapabilitiesPer); err != nil {
		return err
	}
	if err := checkIdents("scenes", r.Scenes, record.MaxScenesPerSkill); err != nil {
		return err
	}
	if len(r.Types) > 3 {
		return fieldErr("types", "lists %d types; there are 3", len(r.Types))
	}
	for i, t := range r.Types {
		if !record.SkillType(t).Valid() {
			return fieldErr(fmt.Sprintf("types[%d]", i), "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(t))
		}
	}
	if len(r.Keywords) > MaxKeywords {
		return fieldErr("keywords", "lists %d keywords, more than %d", len(r.Keywords), MaxKeywords)
	}
	for i, k := range r.Keywords {
		if strings.TrimSpace(k) == "" || len(k) > record.MaxIDLen || !record.Printable(k) {
			return fieldErr(fmt.Sprintf("keywords[%d]", i), "must be 1-%d printable bytes, not blank", record.MaxIDLen)
		}
	}
	if r.Version != "" {
		if len(r.Version) > record.MaxShortTextLen {
			return fieldErr("version", "is longer than %d bytes", record.MaxShortTextLen)
		}
		if _, err := semver.NewConstraint(r.Version); err != nil {
			return fieldErr("version", "%q is not a semver range: %v", trunc(r.Version), err)
		}
	}
	if r.Limit < 0 {
		return fieldErr("limit", "must not be negative")
	}
	if r.Offset < 0 {
		return fieldErr("offset", "must not be negative")
	}
	return nil
}

// DecodeSkillList decodes a §7.3 answer. It accepts what agentd's API and
// the agentd mirror send and what a seed-001 SkillCenter sends: unknown
// members are ignored, "skills": null is an empty list. It refuses input
// over MaxResponseBytes, more than MaxSkillsPerAnswer skills, a negative
// total, strings that are not printable UTF-8 or longer than the record
// limits, and a manifest member that is not I-JSON. Each skill still has
// to pass Skill.Validate before it stands for an agent.
func DecodeSkillList(b []byte) (SkillList, error) {
	var l SkillList
	if len(b) > MaxResponseBytes {
		return l, fmt.Errorf("%w: answer is %d bytes, limit %d", ErrResponseTooLarge, len(b), MaxResponseBytes)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return l, fieldErr("", "a §7.3 answer must be a JSON object {\"total\",\"skills\"}")
	}
	var raw struct {
		Total  *int              `json:"total"`
		Skills []json.RawMessage `json:"skills"`
	}
	if err := strictUnmarshal(b, &raw); err != nil {
		return l, err
	}
	if len(raw.Skills) > MaxSkillsPerAnswer {
		return l, fieldErr("skills", "lists %d skills, more than %d", len(raw.Skills), MaxSkillsPerAnswer)
	}
	l.Skills = make([]Skill, 0, len(raw.Skills))
	for i, rs := range raw.Skills {
		s, err := decodeSkill(rs, fmt.Sprintf("skills[%d]", i))
		if err != nil {
			return SkillList{}, err
		}
		l.Skills = append(l.Skills, s)
	}
	if raw.Total != nil {
		if *raw.Total < 0 {
			return SkillList{}, fieldErr("total", "must not be negative")
		}
		l.Total = *raw.Total
	} else {
		l.Total = len(l.Skills)
	}
	return l, nil
}

// DecodeSkill decodes one skill (the answer of GET /api/skills/{id}) with
// the checks of DecodeSkillList.
func DecodeSkill(b []byte) (Skill, error) {
	if len(b) > MaxResponseBytes {
		return Skill{}, fmt.Errorf("%w: answer is %d bytes, limit %d", ErrResponseTooLarge, len(b), MaxResponseBytes)
	}
	return decodeSkill(b, "")
}

func decodeSkill(b []byte, path string) (Skill, error) {
	var s Skill
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return s, fieldErr(orRoot(path), "must be a JSON object")
	}
	if err := strictUnmarshal(b, &s); err != nil {
		var fe *record.FieldError
		if errors.As(err, &fe) {
			return s, fieldErr(joinPath(path, fe.Field), "%s", fe.Reason)
		}
		return s, err
	}
	if err := s.checkShape(path); err != nil {
		return Skill{}, err
	}
	if len(s.Manifest) > 0 {
		if string(s.Manifest) == "null" {
			s.Manifest = nil
		} else {
			if len(s.Manifest) > MaxManifestBytes {
				return Skill{}, fieldErr(joinPath(path, "manifest"), "is larger than %d bytes", MaxManifestBytes)
			}
			canon, err := record.CanonicalizeJSON(s.Manifest)
			if err != nil {
				return Skill{}, fieldErr(joinPath(path, "manifest"), "is not I-JSON: %v", err)
			}
			s.Manifest = canon
		}
	}
	return s, nil
}

// checkShape bounds every member so that nothing hostile is kept: sizes,
// counts, printable UTF-8.
func (s *Skill) checkShape(path string) error {
	short := func(field, v string, maxLen int) error {
		if len(v) > maxLen || !record.Printable(v) {
			return fieldErr(joinPath(path, field), "must be printable UTF-8 of at most %d bytes", maxLen)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{"id", s.ID, record.MaxIDLen}, {"name", s.Name, record.MaxShortTextLen}, {"version", s.Version, record.MaxShortTextLen},
		{"type", s.Type, record.MaxIDLen}, {"endpoint", s.Endpoint, record.MaxEndpointLen},
		{"downloadUrl", s.DownloadURL, 2048}, {"agentId", s.AgentID, record.MaxIDLen},
		{"status", s.Status, record.MaxIDLen}, {"source", s.Source, record.MaxIDLen},
	} {
		if err := short(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if s.ID == "" {
		return fieldErr(joinPath(path, "id"), "is required")
	}
	if len(s.Description) > record.MaxTextLen || !utf8.ValidString(s.Description) {
		return fieldErr(joinPath(path, "description"), "must be UTF-8 of at most %d bytes", record.MaxTextLen)
	}
	lists := []struct {
		name string
		v    []string
		max  int
	}{
		{"capabilities", s.Capabilities, record.MaxCapabilitiesPer}, {"scenes", s.Scenes, record.MaxScenesPerSkill},
		{"keywords", s.Keywords, MaxKeywords},
	}
	for _, l := range lists {
		if len(l.v) > l.max {
			return fieldErr(joinPath(path, l.name), "lists %d entries, more than %d", len(l.v), l.max)
		}
		for i, v := range l.v {
			if err := short(fmt.Sprintf("%s[%d]", l.name, i), v, record.MaxIDLen); err != nil {
				return err
			}
		}
	}
	if s.Capabilities == nil {
		s.Capabilities = []string{}
	}
	if s.Scenes == nil {
		s.Scenes = []string{}
	}
	if len(s.Keywords) == 0 {
		s.Keywords = nil
	}
	if p := s.Package; p != nil {
		if err := p.validate(joinPath(path, "package")); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that the skill can stand for an agent skill: an
// identifier id, a semantic version, a seed-001 type, at least one
// capability, identifier capabilities and scenes.
func (s *Skill) Validate() error {
	if !ValidID(s.ID) {
		return fieldErr("id", "%q is not a catalog skill id (an identifier without '/' or '..')", trunc(s.ID))
	}
	if _, err := semver.StrictNewVersion(s.Version); err != nil {
		return fieldErr("version", "%q is not a semantic version (MAJOR.MINOR.PATCH)", trunc(s.Version))
	}
	if !record.SkillType(s.Type).Valid() {
		return fieldErr("type", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(s.Type))
	}
	if len(s.Capabilities) == 0 {
		return fieldErr("capabilities", "a skill needs at least one capability")
	}
	if err := checkIdents("capabilities", s.Capabilities, record.MaxCapabilitiesPer); err != nil {
		return err
	}
	return checkIdents("scenes", s.Scenes, record.MaxScenesPerSkill)
}

func (p *Package) validate(path string) error {
	if !validFileName(p.File) {
		return fieldErr(joinPath(path, "file"), "%q must be a plain file name (1-255 printable bytes, no '/', '\\', leading '.')", trunc(p.File))
	}
	if !validSHA256(p.SHA256) {
		return fieldErr(joinPath(path, "sha256"), "must be 64 lowercase hex digits")
	}
	if p.Size < 0 || p.Size > MaxPackageBytes {
		return fieldErr(joinPath(path, "size"), "must be between 0 and %d", int64(MaxPackageBytes))
	}
	return nil
}

// strictUnmarshal decodes one JSON value with numbers and trailing data
// checked: exactly one value, nothing after it.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return jsonErr(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldErr("", "unexpected data after the JSON value")
	}
	return nil
}

func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldErr(te.Field, "must be %s, not JSON %s", te.Type, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fieldErr("", "invalid JSON at byte %d: %v", se.Offset, err)
	}
	return fieldErr("", "invalid JSON: %v", err)
}

// ValidID reports whether id can name a catalog skill: a record
// identifier (record.ValidIdent) that is also a safe single path element
// (it names a directory of the catalog and of the install tree): no '/'
// and no ".." anywhere.
func ValidID(id string) bool {
	return record.ValidIdent(id) && !strings.Contains(id, "/") && !strings.Contains(id, "..")
}

func validFileName(s string) bool {
	return s != "" && len(s) <= 255 && record.Printable(s) && !strings.ContainsAny(s, `/\`) && s[0] != '.'
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func checkIdents(field string, ids []string, maxN int) error {
	if len(ids) > maxN {
		return fieldErr(field, "lists %d entries, more than %d", len(ids), maxN)
	}
	for i, id := range ids {
		if !record.ValidIdent(id) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%q is not an identifier", trunc(id))
		}
		if slices.Contains(ids[:i], id) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "duplicate %q", trunc(id))
		}
	}
	return nil
}

func fieldErr(field, format string, args ...any) *record.FieldError {
	return &record.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func joinPath(path, field string) string {
	switch {
	case path == "":
		return field
	case field == "":
		return path
	}
	return path + "." + field
}

func orRoot(path string) string {
	if path == "" {
		return "skill"
	}
	return path
}

// transportOf guesses the record transport type of a SkillCenter endpoint:
// http for http(s) URLs, ws for ws(s) URLs, tcp for host:port.
func transportOf(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		switch strings.ToLower(u.Scheme) {
		case "http", "https":
			return "http"
		case "ws", "wss":
			return "ws"
		}
	}
	return "tcp"
}

func trunc(s string) string { return record.Truncate(s, 64) }
