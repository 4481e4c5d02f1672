// Package trust holds a node's keys and makes the one trust decision every
// transport calls.
//
// Identity: an agent key (ECDSA P-256, private_key.pem / public_key.pem,
// seed 000 §6.1) signs agent records and seed-001 messages; a peer key
// (Ed25519) is the libp2p identity whose peer id the record names. A record
// carries both signatures over the same canonical bytes (package record), so
// nobody can publish a record for a peer id or an agent key that is not
// theirs.
//
// Verifier applies a Policy on top of the signatures:
//
//   - open: a valid self-signature suffices; the first key seen for an
//     agent_id is pinned and keeps it (a new key needs a rotation statement
//     signed by the old one);
//   - allowlist: only allow-listed agent ids are admitted (seed 000 §6);
//   - ca: agents that are not allow-listed must present a certificate chain
//     to a configured root (seed 001 §10.2), checked by a ChainVerifier.
//
// Every rejection is a *RejectError with a Reason.
package trust
