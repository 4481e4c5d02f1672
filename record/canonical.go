package record

import (
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
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
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: not canonicalizable JSON: %v", ErrMalformed, err)
	}
	return out, nil
}
