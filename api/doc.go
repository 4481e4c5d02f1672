// Package api is agentd's local API: every surface an agent, in any
// language, uses to talk to the agentd beside it. One Server serves them
// all from one http.Handler over a node.Node:
//
//   - REST (seed 000 §3.2, §5.2): POST /agents (an Announce, signed by the
//     agent's own key or unsigned for the node to sign; identical
//     announcements coalesce), GET /agents (capability, skill, scene, type,
//     tag, tenant, version constraint, free text q, limit, include_stale,
//     local_only), GET and DELETE /agents/{id}, PUT /agents/{id}/status,
//     GET /capabilities, /peers, /healthz, /readyz, /metrics, /openapi.json
//     and /schemas/{kind};
//   - JSON-RPC 2.0 at POST /rpc (seed 002): rtfs.registry.register
//     (ttl_seconds is a lease the node enforces), .discover, .deregister
//     and .heartbeat, with batches;
//   - WebSocket at /ws: the seed-003 JSON frames (register, list, plus
//     unregister, ping, watch) and, with the subprotocol agent-discovery,
//     the seed-000 binary frames (0x01 ANNOUNCE, 0x02 QUERY, 0x03
//     RESPONSE). A registration made over a connection is bound to it: when
//     the connection ends the agent gets a lease of one heartbeat window
//     and is unregistered unless it registers again in time;
//   - the SkillCenter endpoints of seed 001 §7 (GET /api/skills,
//     GET /api/skills/{id}, POST /api/skills/search), answered from the
//     node's view.
//
// Errors are one JSON shape everywhere, {"error":code,"message":…,
// "field":…}, with the seed-000 §8.3 codes, the seed-001 DISC_00x codes
// and the Code* constants; a client mistake is never a 5xx. Inputs are
// bounded (Config.MaxBodyBytes, record's message limits), must be I-JSON
// (valid UTF-8, no duplicate member names, member names matched exactly)
// and bodies must be sent as application/json, which keeps web pages from
// posting to the loopback API.
//
// Authentication: on a loopback address the API is open to local clients
// (and refuses requests whose Host header is not a loopback name, against
// DNS rebinding); beyond loopback, or with RequireAuthOnLoopback, every
// request but /healthz and /readyz needs a JWT bearer token (HS256 shared
// secret or ES256 public key, the algorithm pinned by the key) whose
// "scope" (space-separated) or "scopes" (array) claim grants
// discover:read for reads and discover:write for writes.
//
// docs/api.md is the guide and docs/openapi.json (the document served at
// /openapi.json) the reference of the HTTP paths.
package api
