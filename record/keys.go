package record

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// Wildcard is the DHT key placeholder for "any skill" or "any capability".
const Wildcard = "*"

// Key is one DHT key of the map: the SHA-256 digest of "skillId:capability",
// "*:capability" or "skillId:*" (seed 001 §6.2).
type Key struct {
	Skill      string // Wildcard for the capability-only form
	Capability string // Wildcard for the skill-only form
	Digest     [32]byte
}

// String is the preimage, e.g. "skill-org-feishu:org-data-read".
func (k Key) String() string { return k.Skill + ":" + k.Capability }

// Hex is the lowercase hex digest, the exact string of seed 001 §6.2.
func (k Key) Hex() string { return hex.EncodeToString(k.Digest[:]) }

// CID is the CIDv1 (raw codec, sha2-256 multihash of the preimage) used for
// Provide and FindProviders.
func (k Key) CID() cid.Cid {
	m, err := mh.Encode(k.Digest[:], mh.SHA2_256)
	if err != nil {
		panic("record: sha2-256 multihash of a 32-byte digest cannot fail: " + err.Error())
	}
	return cid.NewCidV1(cid.Raw, m)
}

// SkillKey returns the key for a skill and capability. Either may be "" or
// Wildcard to form the wildcard keys.
func SkillKey(skillID, capability string) Key {
	if skillID == "" {
		skillID = Wildcard
	}
	if capability == "" {
		capability = Wildcard
	}
	return Key{Skill: skillID, Capability: capability, Digest: sha256.Sum256([]byte(skillID + ":" + capability))}
}

// QueryKey returns the most specific key for a query: skill+capability when
// both are known, otherwise the wildcard form. ok is false when neither is
// given (nothing to look up).
func QueryKey(skillID, capability string) (Key, bool) {
	if skillID == "" && capability == "" {
		return Key{}, false
	}
	return SkillKey(skillID, capability), true
}

// DHTKeys returns every key the agent provides: for each skill and each of its
// capabilities "skill:cap" and "*:cap", and "skill:*" for each skill; for the
// agent-level capabilities map "*:cap". The result is sorted and has no
// duplicates.
func (a *Agent) DHTKeys() []Key {
	seen := map[[32]byte]Key{}
	add := func(k Key) { seen[k.Digest] = k }
	for _, s := range a.Skills {
		add(SkillKey(s.SkillID, Wildcard))
		for _, c := range s.Capabilities {
			add(SkillKey(s.SkillID, c.ID))
			add(SkillKey(Wildcard, c.ID))
		}
	}
	for c := range a.Capabilities {
		add(SkillKey(Wildcard, c))
	}
	out := make([]Key, 0, len(seen))
	for _, k := range seen {
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y Key) int {
		if x.String() < y.String() {
			return -1
		}
		if x.String() > y.String() {
			return 1
		}
		return 0
	})
	return out
}
