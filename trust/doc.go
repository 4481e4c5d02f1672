// Package trust holds a node's keys and makes the one trust decision every
// transport calls.
//
// Identity: an agent key (ECDSA P-256, private_key.pem / public_key.pem,
// seed 000 §6.1) signs agent records and seed-001 messages; a peer key
// (Ed25519) is the libp2p identity whose peer id the record names. A record
// carries both signatures over the same canonical bytes (package record), so
// nobody can publish a record for a peer id or an agent key that is not
// theirs. An identity may also hold its certificate bundle
// (certificate.pem) and the statement of its last key rotation
// (key_rotation.json); Sign puts both into the records of its key.
//
// Verifier applies a Policy on top of the signatures:
//
//   - open: a valid self-signature suffices; the first key seen for an
//     agent_id is pinned and keeps it;
//   - allowlist: only allow-listed agent ids are admitted (seed 000 §6);
//   - ca: agents that are not allow-listed must present a certificate chain
//     to a configured root (seed 001 §10.2), checked by a ChainVerifier.
//
// A pinned key moves to another key when the record carries a rotation
// statement signed by the pinned key, or when the trust store certifies the
// new key with a later certificate; the previous key stays accepted for
// Config.RotationGrace (default 24 h), then is refused (key_retired).
//
// Store is the certificate trust store (the ChainVerifier): roots,
// intermediates, CRLs and revoked serials from files or directories,
// crypto/x509 path validation with agentd's end-entity policy, revocation,
// and Reload. CA is a small certificate authority (Root CA → SkillCenter CA
// → agent and skill certificates, with CRLs) for tests and small
// deployments; Rotate replaces an identity's agent key on disk.
//
// Every rejection is a *RejectError with a Reason. docs/trust.md is the
// reference.
package trust
