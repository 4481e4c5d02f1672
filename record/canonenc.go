package record

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendAgent appends the RFC 8785 form of a to dst without reflection:
// members in canonical order, strings escaped as RFC 8785 escapes them,
// numbers as ECMAScript writes them. It reports false for what it does
// not write itself (invalid UTF-8, a map key that may sort differently in
// UTF-16, a metadata value of another type): the caller then uses
// Canonicalize. A compact record derives its bytes with it only after
// Compact found them equal to the ones it held, so a difference from
// Canonicalize costs memory, never a wrong signature (FuzzCompact).
func appendAgent(dst []byte, a *Agent) ([]byte, bool) {
	ok := true
	dst = append(dst, '{')
	dst, ok = appendMember(dst, "agent_id", a.AgentID, false, ok)
	dst, ok = appendMember(dst, "agent_name", a.AgentName, true, ok)
	dst = appendName(dst, "capabilities")
	if a.Capabilities == nil {
		dst = append(dst, "null"...)
	} else {
		dst, ok = appendMap(dst, a.Capabilities, ok, appendJCSString)
	}
	dst, ok = appendMember(dst, "certificate", a.Certificate, true, ok)
	dst, ok = appendMember(dst, "description", a.Description, true, ok)
	dst, ok = appendMember(dst, "issued_at", a.IssuedAt, true, ok)
	if r := a.KeyRotation; r != nil {
		dst = appendName(dst, "key_rotation")
		dst = append(dst, '{')
		dst, ok = appendMember(dst, "agent_id", r.AgentID, false, ok)
		dst, ok = appendMember(dst, "issued_at", r.IssuedAt, false, ok)
		dst, ok = appendMember(dst, "new_key", r.NewKey, false, ok)
		dst, ok = appendMember(dst, "old_key", r.OldKey, false, ok)
		dst, ok = appendMember(dst, "signature", r.Signature, false, ok)
		dst = append(dst, '}')
	}
	if len(a.Metadata) > 0 {
		dst = appendName(dst, "metadata")
		dst, ok = appendValue(dst, a.Metadata, ok)
	}
	dst, ok = appendMember(dst, "peer_id", a.PeerID, true, ok)
	dst, ok = appendMember(dst, "public_key", a.PublicKey, true, ok)
	if a.Seq != 0 {
		dst = appendName(dst, "seq")
		dst, ok = appendNumber(dst, float64(a.Seq), ok && a.Seq <= 1<<53)
	}
	if len(a.Skills) > 0 {
		dst = appendName(dst, "skills")
		dst, ok = appendArray(dst, a.Skills, ok, appendSkill)
	}
	if len(a.Tags) > 0 {
		dst = appendName(dst, "tags")
		dst, ok = appendArray(dst, a.Tags, ok, appendStringAt)
	}
	dst, ok = appendMember(dst, "tenant_scope", a.TenantScope, true, ok)
	dst = appendName(dst, "transport")
	dst = append(dst, '{')
	dst, ok = appendMember(dst, "endpoint", a.Transport.Endpoint, false, ok)
	dst, ok = appendMember(dst, "type", a.Transport.Type, false, ok)
	dst = append(dst, '}')
	if a.TTLSeconds != 0 {
		dst = appendName(dst, "ttl_seconds")
		dst, ok = appendNumber(dst, float64(a.TTLSeconds), ok && a.TTLSeconds <= 1<<53 && a.TTLSeconds >= -1<<53)
	}
	dst, ok = appendMember(dst, "version", a.Version, true, ok)
	return append(dst, '}'), ok
}

func appendSkill(dst []byte, s *Skill, ok bool) ([]byte, bool) {
	dst = append(dst, '{')
	dst = appendName(dst, "capabilities")
	if s.Capabilities == nil {
		dst = append(dst, "null"...)
	} else {
		dst, ok = appendArray(dst, s.Capabilities, ok, appendCapability)
	}
	if s.Endpoint != "" {
		dst = appendName(dst, "endpoint")
		dst, ok = appendJCSString(dst, s.Endpoint, ok)
	}
	if len(s.Scenes) > 0 {
		dst = appendName(dst, "scenes")
		dst, ok = appendArray(dst, s.Scenes, ok, appendStringAt)
	}
	dst = appendName(dst, "skill_id")
	dst, ok = appendJCSString(dst, s.SkillID, ok)
	dst = appendName(dst, "skill_type")
	dst, ok = appendJCSString(dst, string(s.SkillType), ok)
	if s.Status != "" {
		dst = appendName(dst, "status")
		dst, ok = appendJCSString(dst, string(s.Status), ok)
	}
	dst = appendName(dst, "version")
	dst, ok = appendJCSString(dst, s.Version, ok)
	return append(dst, '}'), ok
}

func appendCapability(dst []byte, c *Capability, ok bool) ([]byte, bool) {
	dst = append(dst, '{')
	if c.ConfidenceHint != nil {
		dst = appendName(dst, "confidence_hint")
		dst, ok = appendNumber(dst, *c.ConfidenceHint, ok)
	}
	if c.Description != "" {
		dst = appendName(dst, "description")
		dst, ok = appendJCSString(dst, c.Description, ok)
	}
	dst = appendName(dst, "id")
	dst, ok = appendJCSString(dst, c.ID, ok)
	// Schemas are kept as the bytes they were read from; a canonical
	// record's are canonical, and Compact checks the rest.
	if len(c.InputSchema) > 0 {
		dst = appendName(dst, "input_schema")
		dst = append(dst, c.InputSchema...)
	}
	if len(c.OutputSchema) > 0 {
		dst = appendName(dst, "output_schema")
		dst = append(dst, c.OutputSchema...)
	}
	if c.Version != "" {
		dst = appendName(dst, "version")
		dst, ok = appendJCSString(dst, c.Version, ok)
	}
	return append(dst, '}'), ok
}

// appendMember appends a string member, unless omitEmpty and v is "".
func appendMember(dst []byte, name, v string, omitEmpty, ok bool) ([]byte, bool) {
	if omitEmpty && v == "" {
		return dst, ok
	}
	dst = appendName(dst, name)
	return appendJCSString(dst, v, ok)
}

// appendName appends a member name this file knows (plain ASCII) and its
// colon, after a comma unless it opens an object.
func appendName(dst []byte, name string) []byte {
	if dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

// appendArray appends es as a JSON array, each element by appendE.
func appendArray[E any](dst []byte, es []E, ok bool, appendE func([]byte, *E, bool) ([]byte, bool)) ([]byte, bool) {
	dst = append(dst, '[')
	for i := range es {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst, ok = appendE(dst, &es[i], ok)
	}
	return append(dst, ']'), ok
}

func appendStringAt(dst []byte, s *string, ok bool) ([]byte, bool) {
	return appendJCSString(dst, *s, ok)
}

func appendValueAt(dst []byte, v *any, ok bool) ([]byte, bool) { return appendValue(dst, *v, ok) }

// sortedKeys returns m's keys in RFC 8785 order, and false when a key
// holds a character at or above U+E000, where UTF-16 order and the byte
// order used here may differ.
func sortedKeys[V any](m map[string]V) ([]string, bool) {
	if len(m) == 0 {
		return nil, true
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		for i := 0; i < len(k); i++ {
			if k[i] >= 0xEE {
				return nil, false
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, true
}

// appendMap appends m as a JSON object, each value by appendV.
func appendMap[V any](dst []byte, m map[string]V, ok bool, appendV func([]byte, V, bool) ([]byte, bool)) ([]byte, bool) {
	keys, sorted := sortedKeys(m)
	if !sorted {
		return dst, false
	}
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst, ok = appendJCSString(dst, k, ok)
		dst = append(dst, ':')
		dst, ok = appendV(dst, m[k], ok)
	}
	return append(dst, '}'), ok
}

// appendValue appends a decoded JSON value (metadata).
func appendValue(dst []byte, v any, ok bool) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), ok
	case bool:
		return strconv.AppendBool(dst, v), ok
	case string:
		return appendJCSString(dst, v, ok)
	case float64:
		return appendNumber(dst, v, ok)
	case []any:
		return appendArray(dst, v, ok, appendValueAt)
	case map[string]any:
		return appendMap(dst, v, ok, appendValue)
	case json.Number:
		f, err := v.Float64()
		return appendNumber(dst, f, ok && err == nil)
	}
	return dst, false
}

// appendNumber appends f as ECMAScript's Number.prototype.toString writes
// it (RFC 8785 §3.2.2.3), as encoding/json does except for -0.
func appendNumber(dst []byte, f float64, ok bool) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	if f == 0 {
		return append(dst, '0'), ok
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, ok
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasZero has the high bit of each byte of x that is zero set (and maybe
// of bytes above a zero byte, which only makes a caller look closer).
func hasZero(x uint64) uint64 { return (x - lsb) &^ x }

// jcsPlain marks the bytes a JSON string holds as they are: printable
// ASCII other than the quotation mark and the reverse solidus.
var jcsPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJCSString appends s as a JSON string escaped as RFC 8785 does:
// only the quotation mark, the reverse solidus and control characters,
// the latter as \b \t \n \f \r or \u00xx. Invalid UTF-8 gives false.
func appendJCSString(dst []byte, s string, ok bool) ([]byte, bool) {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight plain bytes at a time: none of them at or above 0x80,
		// below 0x20, a quotation mark or a reverse solidus.
		for i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			if (x|(x-lsb*0x20)|hasZero(x^(lsb*'"'))|hasZero(x^(lsb*'\\')))&msb != 0 {
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if jcsPlain[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, false
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), ok
}
