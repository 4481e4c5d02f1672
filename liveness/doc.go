// Package liveness notices crashed peers faster than the seed's heartbeat
// clock, from what the network already says, without evicting a peer
// that is only slow or cut off from this node.
//
// # Suspicion and confirmation
//
// A kill -9 closes the dead process's connections at once (the kernel
// sends RST, or QUIC's idle timeout fires), yet the seed's rules wait for
// three missed heartbeats (UNHEALTHY, 15 s) and the timeout (30 s). When
// the last connection to a peer whose agents the live view holds closes,
// the Detector suspects it and, in the manner of SWIM and Lifeguard:
//
//  1. pings it directly: dial (bypassing the swarm's dial backoff) and a
//     request on /agentd/probe/1.0.0 naming the peer itself, within
//     Config.PingTimeout (2 s). An answer, or a host that answers that it
//     does not speak the protocol (an older agentd), is alive.
//  2. otherwise asks Config.Helpers (3) other connected peers that speak
//     the protocol to reach it (SWIM's ping-req), within
//     Config.AskTimeout (3 s). A process killed on a live
//     host answers at once (its port refuses, or its connections reset); the
//     timeouts only bound a host that went silent, and are generous so
//     that a merely overloaded peer or helper is not taken for dead.
//  3. confirms it down when the direct ping failed, no helper reached it
//     and at least one helper answered that it could not; or, with no
//     helper to ask, when its address refused the connection
//     (ECONNREFUSED: the host is up and nothing listens — two daemons on
//     one machine). Any helper that reaches it refutes the suspicion; no
//     answer at all leaves the decision to the seed's timeout, since the
//     node asking may be the one cut off.
//
// A confirmed peer's agents leave the live view at once (the node's
// Hooks.Down) and the detector publishes a peer_down claim on the
// liveness topic, so nodes that had no connection to the peer learn it
// too. A peer found alive is not suspected again for Config.Cooldown
// (10 s), and the connections this node dialled for the ping are closed
// again, so a connection manager that trimmed the connection is not
// fought (nor is a probe loop started). A peer that connects again clears everything said of it.
//
// # The liveness topic /agentd/liveness/1.0.0
//
// One JSON object per pubsub message (at most 512 bytes, I-JSON),
// signed by its author's host key like every agentd pubsub message:
//
//	{"protocol_version":"v1.0","type":"peer_down","peer_id":"<peer>","at":"<RFC 3339>"}
//
// A claim is a hint, not a verdict: a receiver that holds agents of the
// peer and has an address for it pings the peer itself, and only if that
// fails drops the peer's agents and forwards the claim (the topic
// validator accepts it). A lie therefore stops at the first honest node
// and costs it one ping; each author may make a node check one claim per
// second (bursts of 10); only the first claim about a peer is forwarded,
// so one crash floods the network once however many neighbours saw it;
// a claim older than Config.ClaimWindow (60 s), or dated more than 6 s
// ahead, is ignored; a malformed claim is rejected (score penalty for the
// forwarding peer). Nodes of earlier versions do not join the topic and
// are not affected: negotiation is the subscription itself.
//
// # The probe protocol /agentd/probe/1.0.0
//
// One request and one answer per stream, each an unsigned-varint length
// and at most 512 bytes of JSON:
//
//	request: {"protocol_version":"v1.0","peer_id":"<peer>"}
//	answer:  {"protocol_version":"v1.0","reachable":true|false}
//	     or  {"protocol_version":"v1.0","reachable":false,"error":{"code":"ErrRateLimited","message":"..."}}
//
// A request naming the responder is a ping, answered at once. A request
// naming another peer makes the responder ping that peer (results are
// cached 2 s, so many askers cost one dial); a peer it has no address
// for is answered ErrNotFound, not unreachable, and never looked up. Each asker may make 5
// requests per second (bursts of 10), at most 16 are served at once;
// refusals carry the seed's error codes (ErrRateLimited, ErrUnavailable,
// ErrMalformedPayload, ErrNotFound). An answer with an error counts as no
// answer.
//
// Outcomes are counted in agentd_liveness_suspicions_total{outcome},
// agentd_liveness_claims_total{outcome} and
// agentd_liveness_probes_served_total{answer}.
package liveness
