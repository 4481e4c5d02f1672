// Package skillcenter is agentd's HTTP fallback: a client of the
// SkillCenter API of seed 001 §7, a compatible mirror server, skill
// installation, and the seed-000 registry fallback. It is consulted only
// when P2P finds nothing (the resolver's SkillCenter step) or when no peer
// is reachable (then the local agents register with a registry until P2P
// works again). It imports record, trust and store, never node or api.
//
// # Client
//
// NewClient(url, Options) speaks GET /api/skills, GET /api/skills/{id},
// POST /api/skills/search (§7.2 request, §7.3 answer) and GET
// /api/skills/{id}/download to a seed-001 SkillCenter, the agentd mirror
// or an agentd API. Each attempt is bounded by Options.Timeout (10 s);
// transport errors, timeouts, 5xx and 429 are retried with exponential
// backoff and jitter (Retry-After honoured up to MaxBackoff); a circuit
// breaker opens after BreakerFailures failed attempts in a row and lets
// one probe through after BreakerCooldown (calls meanwhile fail with
// ErrCircuitOpen). Answers are cached by request for CacheTTL (300 s;
// GET answers are revalidated with If-None-Match); when the catalog cannot
// be asked, an expired answer younger than CacheTTL+StaleFor is returned
// marked Stale. Error statuses are *HTTPError carrying agentd's error code.
//
// Client.Resolve is the resolver's SkillCenter step (node.Catalog): it
// maps a store.Filter to the cheapest request, maps each §7.3 skill to an
// agent with one skill (Skill.Agent; agent_id
// record.ExternalAgentID("skillcenter", id), no signature) and keeps those
// the whole filter matches. When the catalog fails it answers from the
// cache with every match marked Stale.
//
// # Wire shapes
//
// A §7.3 skill is {"id","name","version","type","capabilities","scenes",
// "endpoint","downloadUrl"}; the decoder (DecodeSkillList, DecodeSkill)
// ignores unknown members and bounds every field (MaxResponseBytes,
// MaxSkillsPerAnswer, the record limits). Extensions: agentd's API adds
// agentId, status, source; the mirror adds description, keywords,
// package {file, sha256, size} and, on GET /api/skills/{id}, manifest (the
// catalog manifest as RFC 8785 JSON, signature included).
//
// # Mirror
//
// LoadCatalog(DIR) reads DIR/<id>/manifest.json (or .yaml, .yml) for each
// skill and the package file it names, checking every field, the package's
// size and SHA-256, and the signature of a signed manifest; errors name
// the file and the field. NewServer serves it: list and search answers are
// paged (limit ≤ 1000, offset; total counts every match), GET answers
// carry a strong ETag and honour If-None-Match, downloads carry ETag
// "<sha256>", Content-Digest (RFC 9530) and X-Checksum-Sha256 and support
// ranges. With a JWT secret or public key the mirror is also a seed-000
// registry (POST /agents with discover:write, GET /agents and
// /agents/{id} with discover:read): registered records are verified (both
// signatures, expiry, the first key seen keeps an agent id), live for a
// lease (30 s) unless posted again, and their skills join the catalog's
// answers under ids the catalog does not hold.
//
// # Manifests and their signature
//
// A manifest is {id, name, version, type, capabilities, scenes, endpoint,
// description, keywords, package {file, sha256, size}, signature}. The
// signature member is {alg: "ES256", public_key (PKIX PEM) and/or
// certificate (PEM, leaf first), value}: value is the base64 ASN.1 DER
// ECDSA P-256/SHA-256 signature over ManifestContext
// ("agentd.skill_manifest.v1\n") followed by the RFC 8785 form of the
// manifest without its signature member. Since package.sha256 is inside
// the signed bytes, the signature covers the package too. A signer is
// trusted (Anchors) when a certificate trust store verifies its
// certificate for the skill (URI SAN urn:agentd:skill:<id>, or CN) or its
// key is one of the pinned keys.
//
// # Install
//
// Install downloads a skill through the client, checks the package's size
// and SHA-256 against the manifest (and every other digest it was given),
// the manifest's signature against the anchors (RequireSigned refuses
// unsigned or unanchored ones), and renames a fully written directory into
// place at <data dir>/skills/<id>/<version>/, so a corrupt download leaves
// nothing behind.
//
// # Registry fallback
//
// Fallback (seed 000 §3.2, the rollback path) checks every Interval whether
// P2P works; after DownAfter failed checks it POSTs each hosted record
// (its signed Announce) to <registry>/agents with a bearer token, and
// again every Interval to keep them alive; after UpAfter good checks it
// stops and the registry lets the entries expire.
//
// docs/skillcenter.md is the guide; docs/protocol.md ("SkillCenter") the
// wire reference.
package skillcenter
