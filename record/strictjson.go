package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// encoding/json matches object member names to struct fields without regard
// to case, so {"Agent_ID": …} would fill AgentID in Go while every other
// implementation sees no agent_id at all. For signed records that is a
// disagreement about what was signed, so the decoders of this package refuse
// a member whose name differs from a field's name only in case.

// JSONFields returns the exported fields of struct type t by their JSON
// member name (the json tag's name, else the field name; "-" fields left
// out), as encoding/json reads them. The result is cached and must not be
// modified. It is the one place that knows how a type's members are named:
// the strict JSON and YAML readers and the API's decoder use it.
func JSONFields(t reflect.Type) map[string]reflect.StructField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v, ok := fieldCache.Load(t); ok {
		return v.(map[string]reflect.StructField)
	}
	m := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f
	}
	fieldCache.Store(t, m)
	return m
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.StructField

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

// checkMemberCase walks raw against type t and returns a *FieldError for the
// first object member whose name matches a field of t only case-insensitively.
// Input that does not have the expected shape is left to json.Unmarshal to
// report.
func checkMemberCase(raw []byte, t reflect.Type, path string) error {
	return checkMembers(raw, t, path, false)
}

// CheckKnownMembers is checkMemberCase that also refuses members t does not
// know, at any depth (maps and json.RawMessage values take anything). It is
// for input the node re-encodes itself, such as an unsigned registration:
// a member it does not know would be silently dropped from the record it
// signs, so the client is told instead.
func CheckKnownMembers(raw []byte, t reflect.Type, path string) error {
	return checkMembers(raw, t, path, true)
}

func checkMembers(raw []byte, t reflect.Type, path string, known bool) error {
	// One pass over the tokens: a member's value is walked only when its
	// field is a struct or a slice of structs, and skipped otherwise.
	// Duplicate names and invalid UTF-8 are json.Unmarshal's to report.
	// A bytes.Buffer is parsed in place (a bytes.Reader would be copied
	// into the decoder's growing buffer); raw is only read.
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	err := walkMembers(dec, t, &memberPath{name: path}, known)
	var fe *FieldError
	if errors.As(err, &fe) && json.Valid(raw) {
		return err
	}
	// Input that is not JSON at all is json.Unmarshal's to report.
	return nil
}

// memberPath is where walkMembers is: a chain of member names and array
// indexes, written out (String) only for an error, so that a valid
// document costs no path strings.
type memberPath struct {
	up    *memberPath
	name  string // a member name, or the root's path
	index int    // an array index, when isIdx
	isIdx bool
}

func (p *memberPath) String() string {
	if p == nil {
		return ""
	}
	if p.isIdx {
		return fmt.Sprintf("%s[%d]", p.up.String(), p.index)
	}
	if p.up == nil {
		return p.name
	}
	return join(p.up.String(), p.name)
}

// walkMembers reads the next value of dec as a value of type t and
// returns the first member name error in it, or the decoder's error.
func walkMembers(dec *jsontext.Decoder, t reflect.Type, path *memberPath, known bool) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawMessageType:
		return dec.SkipValue()
	case t.Kind() == reflect.Struct && dec.PeekKind() == '{':
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		fields := JSONFields(t)
		for dec.PeekKind() != '}' {
			// The name as it stands in the input, unquoted only when it
			// has escapes: looking it up costs no string.
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			name := []byte(v)
			if len(name) >= 2 && name[0] == '"' {
				name = name[1 : len(name)-1]
			}
			if bytes.IndexByte(name, '\\') >= 0 {
				if name, err = jsontext.AppendUnquote(nil, v); err != nil {
					return err
				}
			}
			f, ok := fields[string(name)]
			if !ok {
				k := string(name)
				for fn := range fields {
					if strings.EqualFold(fn, k) {
						return fieldErr(join(path.String(), trunc(k)), "unknown member; member names are case-sensitive (did you mean %q?)", fn)
					}
				}
				if known {
					return fieldErr(join(path.String(), trunc(k)), "unknown member")
				}
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			// Only a member walkMembers descends into needs its name kept.
			if !hasMembers(f.Type) {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			if err := walkMembers(dec, f.Type, &memberPath{up: path, name: string(name)}, known); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && dec.PeekKind() == '[':
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for i := 0; dec.PeekKind() != ']'; i++ {
			if err := walkMembers(dec, t.Elem(), &memberPath{up: path, index: i, isIdx: true}, known); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	}
	return dec.SkipValue()
}

// hasMembers reports whether walkMembers descends into a value of type t:
// a struct or a slice of structs, other than json.RawMessage.
func hasMembers(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != rawMessageType && (t.Kind() == reflect.Struct || (t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct))
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}
