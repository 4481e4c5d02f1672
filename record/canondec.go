package record

import (
	"strconv"
	"unicode/utf8"
	"unsafe"

	jsonv2 "github.com/go-json-experiment/json"
)

// decodeCanonical decodes an agent object in the form appendAgent writes
// it — RFC 8785, members this version knows, in canonical order — without
// reflection, into a. It reports false for anything else (another member
// order, a member it does not know, null, an escape it does not decode, a
// number other than a plain integer where an integer goes), and the
// caller then decodes the object with jsonv2.Unmarshal: wherever it
// reports true the two must agree (FuzzDecodeCanonical). Members it does
// not take apart itself (metadata, key_rotation, the schemas, a
// capability's confidence_hint) are handed to jsonv2.Unmarshal one by one.
//
// It is what a start spends most of its time in (every hosted record is
// decoded before the API serves): 1.8× faster than jsonv2.Unmarshal on a
// small record (BenchmarkDecodeCanonical; a record whose capabilities
// carry schemas spends its time in jsonv2 either way), and a record whose
// capabilities object another record holds already gets that map without
// building one. The strings it returns point into b, except the agent id
// and the keys of a capabilities map it builds; intern and pack then give
// every other string memory of its own (unique clones what it has not
// seen), so a decoded record does not keep b, which may be Badger's
// (store.EachLocal). FuzzDecodeCanonical checks that too, clearing b
// after decoding.
func decodeCanonical(b []byte, a *Agent) bool {
	d := canonDecoder{b: b}
	if !readObject(&d, agentFields, a) || d.i != len(b) {
		*a = Agent{}
		return false
	}
	return true
}

// canonDecoder reads b from i; each method reports false when the input is
// not what it reads.
type canonDecoder struct {
	b []byte
	i int
}

func (d *canonDecoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *canonDecoder) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// field is a member of an object of type T that decodeCanonical reads:
// its name, and how its value is read into a T.
type field[T any] struct {
	name string
	read func(d *canonDecoder, v *T) bool
}

// readObject reads an object of T whose member names are among fields,
// in their order (the tables below are in canonical order:
// TestCanonicalFieldOrder), each at most once.
func readObject[T any](d *canonDecoder, fields []field[T], v *T) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	next := 0
	for {
		k := memberIndex(d, fields, next)
		if k < 0 || !d.eat(':') || !fields[k].read(d, v) {
			return false
		}
		next = k + 1
		if d.eat('}') {
			return true
		}
		if !d.eat(',') {
			return false
		}
	}
}

// memberIndex reads a member name without escapes and returns its index in
// fields, looking from next on; -1 when it is not there.
func memberIndex[T any](d *canonDecoder, fields []field[T], next int) int {
	if !d.eat('"') {
		return -1
	}
	start := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' {
		if d.b[d.i] == '\\' {
			return -1
		}
		d.i++
	}
	if d.i == len(d.b) {
		return -1
	}
	n := d.b[start:d.i]
	d.i++
	for k := next; k < len(fields); k++ {
		if fields[k].name == string(n) {
			return k
		}
	}
	return -1
}

// strField is a string member; at points at where it goes.
func strField[T any](n string, at func(*T) *string) field[T] {
	return field[T]{n, func(d *canonDecoder, v *T) bool {
		var ok bool
		*at(v), ok = d.str()
		return ok
	}}
}

// stringsField is a member that is an array of strings.
func stringsField[T any](n string, at func(*T) *[]string) field[T] {
	return field[T]{n, func(d *canonDecoder, v *T) bool {
		var ok bool
		*at(v), ok = d.strings()
		return ok
	}}
}

// rawField is a member handed to jsonv2 (raw), never null; an object when
// object is set.
func rawField[T any](n string, object bool, at func(*T) any) field[T] {
	return field[T]{n, func(d *canonDecoder, v *T) bool {
		if c := d.peek(); c == 'n' || object && c != '{' {
			return false
		}
		return d.raw(at(v))
	}}
}

// str reads a string. Without escapes it points into b (see
// decodeCanonical); with them it is a new string.
func (d *canonDecoder) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			if len(s) == 0 {
				return "", true
			}
			return unsafe.String(&s[0], len(s)), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// escaped finishes reading a string that started at start and holds an
// escape at d.i. It decodes the escapes RFC 8785 writes (and \/) and a
// \u escape of a character outside the surrogates; anything else is not
// read here.
func (d *canonDecoder) escaped(start int) (string, bool) {
	end := d.i // the closing quote, or len(b): escapes only shorten
	for end < len(d.b) && d.b[end] != '"' {
		if d.b[end] == '\\' {
			end++
		}
		end++
	}
	buf := make([]byte, 0, min(end, len(d.b))-start)
	buf = append(buf, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(buf) {
				return "", false
			}
			return unsafe.String(&buf[0], len(buf)), true // buf is not used again
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			if d.i+4 > len(d.b) {
				return "", false
			}
			r := rune(0)
			for _, h := range d.b[d.i : d.i+4] {
				switch {
				case '0' <= h && h <= '9':
					r = r<<4 | rune(h-'0')
				case 'a' <= h && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case 'A' <= h && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					return "", false
				}
			}
			if 0xD800 <= r && r <= 0xDFFF {
				return "", false
			}
			d.i += 4
			buf = utf8.AppendRune(buf, r)
		default:
			return "", false
		}
	}
	return "", false
}

// strings reads an array of strings.
func (d *canonDecoder) strings() ([]string, bool) {
	return arrayOf(d, func(s *string) bool {
		var ok bool
		*s, ok = d.str()
		return ok
	})
}

// arrayOf reads an array, each element by read into a new slice; [] is an
// empty slice, as jsonv2 makes it.
func arrayOf[T any](d *canonDecoder, read func(*T) bool) ([]T, bool) {
	out := []T{}
	ok := d.array(func() bool {
		out = append(out, *new(T))
		return read(&out[len(out)-1])
	})
	return out, ok
}

// array reads an array, each element by elem.
func (d *canonDecoder) array(elem func() bool) bool {
	if !d.eat('[') {
		return false
	}
	if d.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.eat(']') {
			return true
		}
		if !d.eat(',') {
			return false
		}
	}
}

// uint reads a non-negative integer as JSON writes it (no sign, no
// fraction, no exponent, no leading zero) that fits in 63 bits.
func (d *canonDecoder) uint() (uint64, bool) {
	start := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.b[start:d.i]
	if len(n) == 0 || len(n) > 18 || len(n) > 1 && n[0] == '0' {
		return 0, false // 18 digits: below 2^63 without a check
	}
	switch d.peek() {
	case ',', '}':
	default:
		return 0, false
	}
	v, err := strconv.ParseUint(unsafe.String(&n[0], len(n)), 10, 64)
	return v, err == nil
}

// raw hands the value at d.i to jsonv2.Unmarshal, which reads it as it
// would within the whole object (the value is its own JSON text: jsonv2
// checks it the same way at any depth).
func (d *canonDecoder) raw(v any) bool {
	start := d.i
	if !d.skip() {
		return false
	}
	return jsonv2.Unmarshal(d.b[start:d.i], v) == nil
}

// skip moves past one value, only as far as to find its end: raw's
// Unmarshal checks it.
func (d *canonDecoder) skip() bool {
	depth := 0
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case '"':
			for d.i++; d.i < len(d.b) && d.b[d.i] != '"'; d.i++ {
				if d.b[d.i] == '\\' {
					d.i++
				}
			}
			if d.i >= len(d.b) {
				return false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true // the end of what holds the value
			}
			depth--
		case ',':
			if depth == 0 {
				return true
			}
		}
		d.i++
	}
	return false
}

// The members decodeCanonical reads, in canonical order.
var (
	agentFields = []field[Agent]{
		{"agent_id", func(d *canonDecoder, a *Agent) bool {
			s, ok := d.str()
			a.AgentID = string([]byte(s)) // its own memory: intern leaves the id alone (pack)
			return ok
		}},
		strField("agent_name", func(a *Agent) *string { return &a.AgentName }),
		{"capabilities", func(d *canonDecoder, a *Agent) bool {
			var ok bool
			a.Capabilities, ok = d.capabilities()
			return ok
		}},
		strField("certificate", func(a *Agent) *string { return &a.Certificate }),
		strField("description", func(a *Agent) *string { return &a.Description }),
		strField("issued_at", func(a *Agent) *string { return &a.IssuedAt }),
		rawField("key_rotation", true, func(a *Agent) any { return &a.KeyRotation }),
		rawField("metadata", true, func(a *Agent) any { return &a.Metadata }),
		strField("peer_id", func(a *Agent) *string { return &a.PeerID }),
		strField("public_key", func(a *Agent) *string { return &a.PublicKey }),
		{"seq", func(d *canonDecoder, a *Agent) bool {
			var ok bool
			a.Seq, ok = d.uint()
			return ok
		}},
		{"skills", func(d *canonDecoder, a *Agent) bool {
			var ok bool
			a.Skills, ok = arrayOf(d, func(s *Skill) bool { return readObject(d, skillFields, s) })
			return ok
		}},
		stringsField("tags", func(a *Agent) *[]string { return &a.Tags }),
		strField("tenant_scope", func(a *Agent) *string { return &a.TenantScope }),
		{"transport", func(d *canonDecoder, a *Agent) bool { return readObject(d, transportFields, &a.Transport) }},
		{"ttl_seconds", func(d *canonDecoder, a *Agent) bool {
			n, ok := d.uint()
			a.TTLSeconds = int64(n)
			return ok
		}},
		strField("version", func(a *Agent) *string { return &a.Version }),
	}
	transportFields = []field[Transport]{
		strField("endpoint", func(t *Transport) *string { return &t.Endpoint }),
		strField("type", func(t *Transport) *string { return &t.Type }),
	}
	skillFields = []field[Skill]{
		{"capabilities", func(d *canonDecoder, s *Skill) bool {
			var ok bool
			s.Capabilities, ok = arrayOf(d, func(c *Capability) bool { return readObject(d, capabilityFields, c) })
			return ok
		}},
		strField("endpoint", func(s *Skill) *string { return &s.Endpoint }),
		stringsField("scenes", func(s *Skill) *[]string { return &s.Scenes }),
		strField("skill_id", func(s *Skill) *string { return &s.SkillID }),
		strField("skill_type", func(s *Skill) *string { return (*string)(&s.SkillType) }),
		strField("status", func(s *Skill) *string { return (*string)(&s.Status) }),
		strField("version", func(s *Skill) *string { return &s.Version }),
	}
	capabilityFields = []field[Capability]{
		rawField("confidence_hint", false, func(c *Capability) any { return &c.ConfidenceHint }),
		strField("description", func(c *Capability) *string { return &c.Description }),
		strField("id", func(c *Capability) *string { return &c.ID }),
		rawField("input_schema", false, func(c *Capability) any { return &c.InputSchema }),
		rawField("output_schema", false, func(c *Capability) any { return &c.OutputSchema }),
		strField("version", func(c *Capability) *string { return &c.Version }),
	}
)

// noCapabilities is the capabilities of every record that has none: a
// decoded record's map is never modified (shareCapabilities).
var noCapabilities = map[string]string{}

// capabilities reads the agent's capabilities object, its keys in
// increasing byte order (so none twice). Most records hold an object that
// another already holds, and get that record's map (shareCapabilities)
// without building one; otherwise the keys are strings of their own
// memory (a map's keys are not interned) and intern shares the values.
func (d *canonDecoder) capabilities() (map[string]string, bool) {
	if !d.eat('{') {
		return nil, false
	}
	if d.eat('}') {
		return noCapabilities, true
	}
	var pairs [2 * maxSharedCapsLen]string
	kv := pairs[:0]
	for {
		k, ok := d.str()
		if !ok || len(kv) > 0 && k <= kv[len(kv)-2] || !d.eat(':') {
			return nil, false
		}
		v, ok := d.str()
		if !ok {
			return nil, false
		}
		kv = append(kv, k, v)
		if d.eat('}') {
			break
		}
		if !d.eat(',') {
			return nil, false
		}
	}
	if len(kv) <= 2*maxSharedCapsLen {
		if m, ok := sharedCapabilities(kv); ok {
			return m, true
		}
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[string([]byte(kv[i]))] = kv[i+1]
	}
	return m, true
}
