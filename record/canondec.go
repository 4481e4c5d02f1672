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
// decoded before the API serves): 1.6× faster than jsonv2.Unmarshal on a
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
	if !d.agent(a) || d.i != len(b) {
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

// member names, in canonical order.
var (
	agentMembers      = []string{"agent_id", "agent_name", "capabilities", "certificate", "description", "issued_at", "key_rotation", "metadata", "peer_id", "public_key", "seq", "skills", "tags", "tenant_scope", "transport", "ttl_seconds", "version"}
	skillMembers      = []string{"capabilities", "endpoint", "scenes", "skill_id", "skill_type", "status", "version"}
	capabilityMembers = []string{"confidence_hint", "description", "id", "input_schema", "output_schema", "version"}
	transportMembers  = []string{"endpoint", "type"}
)

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

// object reads an object whose member names are among names, in their
// order, each at most once; member reads the value of names[k].
func (d *canonDecoder) object(names []string, member func(k int) bool) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	next := 0
	for {
		k := d.name(names, next)
		if k < 0 || !d.eat(':') || !member(k) {
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

// name reads a member name without escapes and returns its index in
// names, looking from next on; -1 when it is not there.
func (d *canonDecoder) name(names []string, next int) int {
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
	for k := next; k < len(names); k++ {
		if names[k] == string(n) {
			return k
		}
	}
	return -1
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

func (d *canonDecoder) agent(a *Agent) bool {
	return d.object(agentMembers, func(k int) bool {
		var ok bool
		switch agentMembers[k] {
		case "agent_id":
			if a.AgentID, ok = d.str(); ok {
				// Its own memory: intern leaves the id alone (pack).
				a.AgentID = string([]byte(a.AgentID))
			}
		case "agent_name":
			a.AgentName, ok = d.str()
		case "capabilities":
			a.Capabilities, ok = d.capabilities()
		case "certificate":
			a.Certificate, ok = d.str()
		case "description":
			a.Description, ok = d.str()
		case "issued_at":
			a.IssuedAt, ok = d.str()
		case "key_rotation":
			ok = d.peek() == '{' && d.raw(&a.KeyRotation)
		case "metadata":
			ok = d.peek() == '{' && d.raw(&a.Metadata)
		case "peer_id":
			a.PeerID, ok = d.str()
		case "public_key":
			a.PublicKey, ok = d.str()
		case "seq":
			a.Seq, ok = d.uint()
		case "skills":
			a.Skills, ok = arrayOf(d, d.skill)
		case "tags":
			a.Tags, ok = d.strings()
		case "tenant_scope":
			a.TenantScope, ok = d.str()
		case "transport":
			ok = d.object(transportMembers, func(k int) bool {
				var ok bool
				if k == 0 {
					a.Transport.Endpoint, ok = d.str()
				} else {
					a.Transport.Type, ok = d.str()
				}
				return ok
			})
		case "ttl_seconds":
			var n uint64
			n, ok = d.uint()
			a.TTLSeconds = int64(n)
		case "version":
			a.Version, ok = d.str()
		}
		return ok
	})
}

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

func (d *canonDecoder) skill(s *Skill) bool {
	return d.object(skillMembers, func(k int) bool {
		var ok bool
		var v string
		switch skillMembers[k] {
		case "capabilities":
			s.Capabilities, ok = arrayOf(d, d.capability)
		case "endpoint":
			s.Endpoint, ok = d.str()
		case "scenes":
			s.Scenes, ok = d.strings()
		case "skill_id":
			s.SkillID, ok = d.str()
		case "skill_type":
			v, ok = d.str()
			s.SkillType = SkillType(v)
		case "status":
			v, ok = d.str()
			s.Status = Status(v)
		case "version":
			s.Version, ok = d.str()
		}
		return ok
	})
}

func (d *canonDecoder) capability(c *Capability) bool {
	return d.object(capabilityMembers, func(k int) bool {
		var ok bool
		switch capabilityMembers[k] {
		case "confidence_hint":
			ok = d.peek() != 'n' && d.raw(&c.ConfidenceHint)
		case "description":
			c.Description, ok = d.str()
		case "id":
			c.ID, ok = d.str()
		case "input_schema":
			ok = d.peek() != 'n' && d.raw(&c.InputSchema)
		case "output_schema":
			ok = d.peek() != 'n' && d.raw(&c.OutputSchema)
		case "version":
			c.Version, ok = d.str()
		}
		return ok
	})
}
