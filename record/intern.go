package record

import (
	"encoding/binary"
	"slices"
	"sync"
	"unique"
	"unsafe"
)

// intern replaces the agent's strings that many records share with one
// copy each (unique.Make): the public key PEM and peer id (every record a
// node hosts under its own key names the same ones), the transport type,
// versions, skill and capability ids and types, scenes and tags. A
// registry node holds every hosted record decoded, and these strings were
// about a tenth of what a decoded record keeps. The capabilities object
// is shared whole between records that have the same one
// (shareCapabilities): a small Go map costs ~300 bytes however few its
// entries. The strings that tell records apart (agent id, name,
// description, endpoints) are not interned, which would only add a lookup;
// all but the agent id are packed into one allocation (pack).
//
// The sharing holds among the records decoded between two garbage
// collections: unique.Make's table keeps a value only while a Handle to it
// is alive, and a record keeps the string, not the Handle, so after a
// collection the next record gets a fresh copy. A start decoding 100 000
// records shares within each cycle; records decoded over hours share less.
// Lasting sharing needs a table whose entries live as long as their bytes
// (weak pointers to the bytes themselves), not built.
func (a *Agent) intern() {
	in := func(s *string) {
		if *s != "" {
			*s = unique.Make(*s).Value()
		}
	}
	in(&a.PublicKey)
	in(&a.Certificate)
	in(&a.PeerID)
	in(&a.Transport.Type)
	in(&a.Version)
	in(&a.TenantScope)
	for i := range a.Tags {
		in(&a.Tags[i])
	}
	if a.Capabilities != nil {
		a.Capabilities = shareCapabilities(a.Capabilities)
	}
	for i := range a.Skills {
		sk := &a.Skills[i]
		in(&sk.SkillID)
		in(&sk.Version)
		in((*string)(&sk.SkillType))
		in((*string)(&sk.Status))
		for j := range sk.Scenes {
			in(&sk.Scenes[j])
		}
		for j := range sk.Capabilities {
			c := &sk.Capabilities[j]
			in(&c.ID)
			in(&c.Version)
		}
	}
	a.pack()
}

// pack puts the strings of the agent that no other record shares (name,
// description, endpoints, issued_at, capability descriptions) into one
// allocation, each field a slice of it. A registry holds 100 000 decoded
// records, and the collector's marking costs per object: these were four
// to five of the ~20 objects a held record is made of. The agent id stays
// its own string: indexes keep it as a map key for as long as the agent
// is known, and a key cut from a packed string would keep the whole of
// the first record's strings alive after the record was replaced. A
// single string is copied too: decodeCanonical's strings point into the
// bytes they were read from until pack and intern copy them.
func (a *Agent) pack() {
	var buf [16]*string
	fields := a.packed(buf[:0])
	n, count := 0, 0
	for _, s := range fields {
		if *s != "" {
			n += len(*s)
			count++
		}
	}
	if count == 0 {
		return
	}
	b := make([]byte, 0, n)
	for _, s := range fields {
		b = append(b, *s...)
	}
	all := unsafe.String(unsafe.SliceData(b), len(b)) // b is not used again
	off := 0
	for _, s := range fields {
		if l := len(*s); l > 0 {
			*s = all[off : off+l]
			off += l
		}
	}
}

// packed appends to ps the fields pack puts together, in one order.
func (a *Agent) packed(ps []*string) []*string {
	ps = append(ps, &a.AgentName, &a.Description, &a.Transport.Endpoint, &a.IssuedAt)
	for i := range a.Skills {
		sk := &a.Skills[i]
		ps = append(ps, &sk.Endpoint)
		for j := range sk.Capabilities {
			ps = append(ps, &sk.Capabilities[j].Description)
		}
	}
	return ps
}

// Capabilities objects shared between decoded records. Records that offer
// the same capabilities (the replicas of one service, every agent of one
// kind in a registry) hold one map. The table is bounded: when it is full
// it starts again empty, and the maps already shared stay shared.
const (
	maxCapSets       = 1 << 14
	maxSharedCapsLen = 16 // larger objects are rarely identical; not worth the key
)

var capSets = struct {
	sync.Mutex
	m map[string]map[string]string
}{m: map[string]map[string]string{}}

// appendCapSetKey appends a capability and its version to the key of
// capSets, which holds the pairs of a map in increasing order of keys,
// each string after its length: {"a\x00b":"c"} and {"a":"b\x00c"} have
// different keys (they shared one while a NUL separated the strings, and
// a map enters capSets before its record is validated).
func appendCapSetKey(b []byte, k, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// sharedCapabilities returns the shared map whose pairs are kv (key,
// value, key, value…, keys in increasing order), if there is one.
func sharedCapabilities(kv []string) (map[string]string, bool) {
	var buf [512]byte
	b := buf[:0]
	for i := 0; i < len(kv); i += 2 {
		b = appendCapSetKey(b, kv[i], kv[i+1])
	}
	capSets.Lock()
	defer capSets.Unlock()
	m, ok := capSets.m[string(b)]
	return m, ok
}

// shareCapabilities returns the shared map equal to m, or m itself (its
// values interned) when it is the first of its kind or too large to share.
// A shared map belongs to every record holding it: decoded records are
// never modified (SyncCapabilities copies a map before it adds to it).
func shareCapabilities(m map[string]string) map[string]string {
	if len(m) > maxSharedCapsLen {
		for k, v := range m {
			m[k] = unique.Make(v).Value()
		}
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		b = appendCapSetKey(b, k, m[k])
	}
	key := string(b)
	capSets.Lock()
	defer capSets.Unlock()
	if s, ok := capSets.m[key]; ok {
		return s
	}
	for k, v := range m {
		m[k] = unique.Make(v).Value()
	}
	if len(capSets.m) >= maxCapSets {
		clear(capSets.m)
	}
	capSets.m[key] = m
	return m
}
