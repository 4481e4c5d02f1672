package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Canonicalize returns the RFC 8785 (JCS) canonical form of v, which is
// first marshalled with encoding/json. It fails for values JSON cannot
// represent exactly (NaN, infinities).
func Canonicalize(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return CanonicalizeJSON(raw)
}

// CanonicalizeJSON returns the RFC 8785 canonical form of JSON text. Input
// that is not I-JSON (RFC 7493) is rejected: duplicate member names, invalid
// UTF-8, lone surrogates, numbers outside IEEE-754 doubles.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	// Value.Canonicalize rewrites the value in place; raw is the caller's.
	// Its defaults are I-JSON's: duplicate names and invalid UTF-8
	// (lone surrogates included) are errors.
	out := jsontext.Value(bytes.Clone(raw))
	if err := out.Canonicalize(); err != nil {
		return nil, fmt.Errorf("%w: not canonicalizable JSON: %v", ErrMalformed, err)
	}
	// A number beyond the doubles is written as the largest one; RFC 8785
	// (and I-JSON) have it refused. Only a document whose output holds
	// that number needs the second look.
	if bytes.Contains(out, maxDouble) {
		if err := checkNumberRange(raw); err != nil {
			return nil, fmt.Errorf("%w: not canonicalizable JSON: %v", ErrMalformed, err)
		}
	}
	return out, nil
}

// CheckNumbers reports, as CanonicalizeJSON would, a number of the JSON
// text raw that does not fit a double (RFC 7493 §2.2), without building
// the canonical form. raw must be valid JSON. Only a text holding a
// number with an exponent or with more than 308 integer digits is parsed:
// no other number can be beyond a double.
func CheckNumbers(raw []byte) error {
	if !mayOverflow(raw) {
		return nil
	}
	if err := checkNumberRange(raw); err != nil {
		return fmt.Errorf("%w: not canonicalizable JSON: %v", ErrMalformed, err)
	}
	return nil
}

// mayOverflow reports whether the JSON text raw holds, outside its
// strings, an exponent (an e after a digit) or a run of more than 308
// digits.
func mayOverflow(raw []byte) bool {
	inString, escaped, digits := false, false, 0
	var prev byte
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString, digits = true, 0
		case c >= '0' && c <= '9':
			if digits++; digits > 308 {
				return true
			}
		case (c == 'e' || c == 'E') && prev >= '0' && prev <= '9':
			return true
		default:
			digits = 0
		}
		prev = c
	}
	return false
}

// maxDouble is math.MaxFloat64 as RFC 8785 writes it.
var maxDouble = []byte("1.7976931348623157e+308")

// checkNumberRange reports the first number of the JSON text raw that
// does not fit a double.
func checkNumberRange(raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw)) // parsed in place; raw is only read
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() != '0' {
			continue
		}
		if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
			return fmt.Errorf("number %s does not fit a double", tok.String())
		}
	}
}
