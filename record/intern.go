package record

import "unique"

// intern replaces the agent's strings that many records share with one
// copy each (unique.Make): the public key PEM and peer id (every record a
// node hosts under its own key names the same ones), the transport type,
// versions, skill and capability ids and types, scenes and tags. A
// registry node holds every hosted record decoded, and these strings were
// about a tenth of what a decoded record keeps. The strings that tell
// records apart (agent id, name, description, endpoints) are left alone:
// interning them would only add a lookup.
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
	for k, v := range a.Capabilities {
		a.Capabilities[k] = unique.Make(v).Value()
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
