package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/agentd/agentd/record"
)

// decodeObject decodes a JSON object into the struct v strictly: the text
// must be I-JSON (valid UTF-8, no duplicate member names), member names
// must match the struct's exactly (encoding/json alone would fill a field
// from a member differing in case), and, unless allowUnknown, members the
// struct does not know are refused. Errors are *record.FieldError named
// under prefix.
func decodeObject(raw []byte, v any, prefix string, allowUnknown bool) error {
	if _, err := record.CanonicalizeJSON(raw); err != nil {
		return &record.FieldError{Field: prefix, Reason: "is not valid JSON (I-JSON: UTF-8, no duplicate member names): " + innerReason(err)}
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return &record.FieldError{Field: prefix, Reason: "must be a JSON object"}
	}
	names := record.JSONFields(reflect.TypeOf(v))
	for k := range members {
		if _, ok := names[k]; ok {
			continue
		}
		for n := range names {
			if strings.EqualFold(n, k) {
				return &record.FieldError{Field: joinField(prefix, truncate(k)), Reason: fmt.Sprintf("unknown member; member names are case-sensitive (did you mean %q?)", n)}
			}
		}
		if !allowUnknown {
			return &record.FieldError{Field: joinField(prefix, truncate(k)), Reason: "unknown member"}
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &record.FieldError{Field: joinField(prefix, te.Field), Reason: fmt.Sprintf("must be %s, not JSON %s", jsonKind(te.Type), te.Value)}
		}
		return &record.FieldError{Field: prefix, Reason: err.Error()}
	}
	return nil
}

// innerReason strips record's "malformed payload: " prefix.
func innerReason(err error) string {
	s := err.Error()
	if i := strings.Index(s, "not canonicalizable JSON: "); i >= 0 {
		return s[i+len("not canonicalizable JSON: "):]
	}
	return s
}

// jsonKind names a Go type by the JSON it reads.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

func joinField(prefix, f string) string {
	switch {
	case prefix == "":
		return f
	case f == "":
		return prefix
	}
	return prefix + "." + f
}

// ---- query strings ----

// queryParams is a parsed query string that refuses unknown and repeated
// parameters and text that is not printable UTF-8.
type queryParams struct {
	v url.Values
}

func parseQuery(raw string, known ...string) (queryParams, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return queryParams{}, badRequest("", "the query string does not parse: %v", err)
	}
	for k, vals := range v {
		if !containsStr(known, k) {
			return queryParams{}, badRequest(truncate(k), "unknown query parameter (known: %s)", strings.Join(known, ", "))
		}
		for _, x := range vals {
			if len(x) > record.MaxEndpointLen || !record.Printable(x) {
				return queryParams{}, badRequest(k, "must be printable UTF-8 of at most %d bytes", record.MaxEndpointLen)
			}
		}
	}
	return queryParams{v: v}, nil
}

// one returns a parameter that may be given at most once.
func (q queryParams) one(name string) (string, error) {
	vals := q.v[name]
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return vals[0], nil
	}
	return "", badRequest(name, "is given %d times; give it once", len(vals))
}

func (q queryParams) all(name string) []string { return q.v[name] }

func (q queryParams) ident(name string) (string, error) {
	s, err := q.one(name)
	if err != nil || s == "" {
		return s, err
	}
	if !record.ValidIdent(s) {
		return "", badRequest(name, "%q is not an identifier (letters, digits and _ . / @ + -, at most %d bytes)", truncate(s), record.MaxIDLen)
	}
	return s, nil
}

func (q queryParams) boolean(name string) (bool, error) {
	s, err := q.one(name)
	if err != nil || s == "" {
		return false, err
	}
	b, perr := strconv.ParseBool(s)
	if perr != nil {
		return false, badRequest(name, "must be true or false, not %q", truncate(s))
	}
	return b, nil
}

func (q queryParams) integer(name string, def, lo, hi int) (int, error) {
	s, err := q.one(name)
	if err != nil || s == "" {
		return def, err
	}
	n, perr := strconv.Atoi(s)
	if perr != nil || n < lo || n > hi {
		return 0, badRequest(name, "must be an integer from %d to %d, not %q", lo, hi, truncate(s))
	}
	return n, nil
}
