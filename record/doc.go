// Package record is agentd's data model and its wire shapes. It does no I/O.
//
// The agent record (Agent) is the seed-000 agent object — agent_id (a
// UUIDv4), agent_name, capabilities, public_key, transport, metadata —
// extended with peer_id, description, version, seed-001 skills, tags,
// tenant_scope, seq, issued_at and ttl_seconds. Validate names the offending
// field of every error (*FieldError); ValidateContent checks a record the
// signer has not yet filled (Fill).
//
// Signing: the RFC 8785 canonical JSON of the agent object (Canonicalize,
// go-json-experiment/json's jsontext) is signed twice, by the agent key
// (ECDSA P-256, SHA-256, base64 ASN.1 DER: "signature") and by the Ed25519
// peer key whose id the record names ("peer_signature").
// SignedAgent.VerifySignatures checks both, so a record can be published
// neither for another peer id nor for another agent key. Trust policy is
// package trust's. A record a node keeps for long (a hosted one) may be
// compact (SignedAgent.Compact): it drops its canonical bytes once it has
// checked that its agent object encodes to exactly them, and Canonical
// encodes them again when asked.
//
// Codecs, each with a parser that bounds its input and names the offending
// field, and a formatter whose output the parser reads back to the same
// value:
//
//   - seed 000: Announce, Query and Response messages with version
//     negotiation (CheckVersion), and their embedded JSON Schemas
//     (ValidateSchema);
//   - seed 001: the SKILL_* text messages of the LAN (ParseSkillMessage,
//     SkillMessage.Format), signed with ECDSA or HMAC;
//   - seed 002: the agent_card (ParseAgentCard, AgentCard.ToAgent,
//     CardFromAgent);
//   - seed 003: the WebSocket registry frames (ParseWSFrame,
//     MarshalWSFrame, WSRegister.ToAgent);
//   - seed 004: AgentSpec YAML (ParseAgentSpec, AgentSpec.ToAgent), and
//     LoadAgentFile for any agent file;
//   - signed liveness statements (Beat, WireBeat).
//
// DHT keys (SkillKey, Agent.DHTKeys) are SHA-256 of "skill:capability",
// "*:capability" and "skill:*", used as CIDv1 (raw, sha2-256).
//
// docs/protocol.md is the reference for all of these: layouts, mappings,
// test vectors and limits.
package record
