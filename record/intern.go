package record

import (
	"slices"
	"strings"
	"sync"
	"unique"
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
// description, endpoints) are left alone: interning them would only add a
// lookup.
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
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
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
