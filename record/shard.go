package record

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"unique"
)

// ShardBits is the width of a liveness shard: 2^16 shards. A shard is the
// first 16 bits of a capability's wildcard DHT key SHA256("*:" + capability)
// (seed 001 §6.2), written as 4 lowercase hex digits. With 65 536 shards,
// two capabilities of a catalogue of 10 000 share a shard with probability
// under 1 in 6, so a shard topic carries, in practice, the agents of one
// capability.
const ShardBits = 16

// Shard returns the liveness shard of a capability: 4 lowercase hex digits.
func Shard(capability string) string {
	d := SkillKey(Wildcard, capability).Digest
	return hex.EncodeToString(d[:ShardBits/8])
}

// ValidShard reports whether s is a shard as Shard writes it.
func ValidShard(s string) bool {
	if len(s) != ShardBits/4 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Shards returns the shards of every capability the agent offers (its
// skills' capabilities and its agent-level capabilities), sorted, without
// duplicates.
func (a *Agent) Shards() []string {
	var out []string
	for _, c := range a.AllCapabilities() {
		// Interned: a registry keeps every hosted agent's shards, and
		// agents of one capability share one string.
		out = append(out, unique.Make(Shard(c)).Value())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// InShards reports whether the agent offers a capability in one of shards
// (a set).
func (a *Agent) InShards(shards map[string]bool) bool {
	for _, c := range a.AllCapabilities() {
		if shards[Shard(c)] {
			return true
		}
	}
	return false
}

// RendezvousKey is the DHT key whose providers are the subscribers of a
// shard topic: SHA256 of the topic name "/agentd/shard/<shard>/1.0.0". A
// topic name has no ":", so it cannot collide with a skill key.
func RendezvousKey(shard string) Key {
	topic := "/agentd/shard/" + shard + "/1.0.0"
	return Key{Skill: topic, Capability: "", Digest: sha256.Sum256([]byte(topic))}
}
