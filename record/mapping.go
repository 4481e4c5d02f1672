package record

import (
	"crypto/sha256"
	"strings"

	"github.com/google/uuid"
)

// ExternalAgentID maps an agent id from another system (a seed-002
// agent_card's "agent-001", a seed-003 frame's "agent-1") to a deterministic
// UUIDv4-shaped agent_id: the first 16 bytes of SHA-256(namespace + ":" +
// id) with the version nibble set to 4 and the RFC 4122 variant bits set.
// The same (namespace, id) always gives the same agent_id, and different
// namespaces keep equal foreign ids apart. Converters keep the original id in
// metadata under MetaExternalID.
func ExternalAgentID(namespace, id string) string {
	h := sha256.Sum256([]byte(namespace + ":" + id))
	var u uuid.UUID
	copy(u[:], h[:16])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant (10xx)
	return u.String()
}

// Metadata keys written by the converters from other seeds' shapes.
const (
	// MetaExternalID holds the original id of an agent whose foreign id was
	// not a UUIDv4 (see ExternalAgentID).
	MetaExternalID = "external_id"
	// MetaDisplayName holds a human-readable name that is not a DNS label
	// (seed-002 agent_card name).
	MetaDisplayName = "display_name"
)

// agentIDFor returns id when it is already a valid agent_id (an RFC 4122
// UUIDv4), else ExternalAgentID(namespace, id) and true.
func agentIDFor(namespace, id string) (string, bool) {
	if ValidateAgentID(id) == nil {
		return id, false
	}
	return ExternalAgentID(namespace, id), true
}

// DNSLabel derives a DNS label (the agent_name form) from a free-form name:
// lower case, a '-' at each lower-to-upper case change ("DataProcessorAgent"
// → "data-processor-agent"), every run of other characters than ASCII
// letters and digits replaced by one '-', no leading or trailing '-', at most
// 63 bytes. It returns "" when nothing usable remains.
func DNSLabel(name string) string {
	var b strings.Builder
	dash := false // a '-' is pending
	var prev rune
	for _, r := range name {
		isUpper := r >= 'A' && r <= 'Z'
		isAlnum := isUpper || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		if !isAlnum {
			dash = b.Len() > 0
			prev = r
			continue
		}
		if isUpper && ((prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9')) {
			dash = true
		}
		if dash && b.Len() > 0 {
			if b.Len() >= 62 {
				break
			}
			b.WriteByte('-')
		}
		dash = false
		if b.Len() >= 63 {
			break
		}
		if isUpper {
			r += 'a' - 'A'
		}
		b.WriteRune(r)
		prev = r
		if isUpper {
			prev = r - ('a' - 'A')
		}
	}
	return strings.TrimRight(b.String(), "-")
}
