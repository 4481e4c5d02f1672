// Package gossip is agentd's GossipSub transport (go-libp2p-pubsub): the
// network-wide announce topic, scene topics, the validators that guard
// them, peer scoring, and the /agentd/sync/1.0.0 protocol that gives a
// joining node the live view its neighbours hold. Gossip only carries
// news; Sync and the unknown-agent fetch make sure nobody stays blind to
// what was announced before it arrived.
//
// # Topics
//
//   - /agentd/shard/<shard>/1.0.0 — joined with JoinShard for the shards
//     (record.Shard: 4 hex digits of SHA256("*:"+capability)) of a node's
//     interest; it carries the announce, heartbeat, status and unregister
//     messages of agents with a capability in the shard. A node asks the
//     topic's first Config.SyncPeers peers for the shard's live agents
//     (ShardReady once one answered), and a second after the first answer
//     asks once more (a trailing sync, TrailSyncProtocol: the shards it
//     joined together in one request to as few peers as hold them), for
//     the records announced while it joined.
//   - /agentd/announce/1.0.0 — every unscoped node subscribes; it carries
//     announce, heartbeat, status and unregister messages of every agent.
//     A scoped node (Config.Scoped) joins it without subscribing and
//     publishes there only while it has subscribers; it subscribes (the
//     bridge) while a subscriber serves SyncProtocol but not
//     ScopedSyncProtocol: a node of the previous version.
//   - /agentd/scene/<name>/1.0.0 — joined with JoinScene (seed 001 §4);
//     PublishAnnounce also publishes there when the record has a skill in
//     the scene. An announcement on a scene topic must list the scene.
//
// # Wire format
//
// One JSON object per pubsub message, at most 64 KiB
// (record.MaxMessageBytes), I-JSON (RFC 7493: no duplicate names):
//
//	{"protocol_version":"v1.0","type":"announce","announce":{<record.Announce>}}
//	{"protocol_version":"v1.0","type":"heartbeat"|"status"|"unregister","beat":{<record.WireBeat>}}
//
// record.Announce is the seed-000 Announce message (agent object,
// signature by the agent key, peer_signature by the peer key, both over
// the RFC 8785 form of the agent object). record.WireBeat is
// {"beat":{agent_id, peer_id, seq, status, timestamp, reason, interval_ms},
// "signature":<base64 agent-key signature over the RFC 8785 form of beat>}.
// The beat member is at most 4 KiB (record.MaxBeatBytes). A status
// message must carry status; an unregister message must carry reason
// (SHUTDOWN, ERROR, MAINTENANCE, UPGRADE). Member names are
// case-sensitive: a member that differs from a known one only in case is
// malformed (encoding/json would otherwise read it). Unknown members are
// ignored.
//
// Protocol version v1.1 adds the heartbeat batch (KindBeats, EncodeBatch,
// PublishHeartbeats):
//
//	{"protocol_version":"v1.1","type":"beats","beats":[{agent_id, seq, status?, timestamp, interval_ms?}, ...]}
//
// 1 to MaxBatchBeats heartbeats of distinct agents hosted by the message's
// author, without peer_id or signature: the pubsub signature authenticates
// them, and each entry is judged as a heartbeat signed by the author's peer
// key (record.BeatSignerBatch). A node lists BatchProtocol when it reads
// batches, and sends them on a topic only when every peer it knows there
// lists it.
//
// Protocol v1.2 adds the envelope member "resend" (1 to MaxResend) to an
// announcement: its host sends the same signed record again, for peers
// that missed it, instead of signing it again with a new seq
// (PublishResend, EncodeResend). A node whose live view holds exactly that
// record (RecordHolder) forwards the resend without verifying or
// delivering it again, each counter once (resendLog); one that does not
// hold it takes it as an announcement. A node lists ResendProtocol when it
// forwards resends, and a host resends only on topics whose every known
// peer lists it.
//
// Protocol v1.3 adds the beat request (KindWanted, PublishWanted):
//
//	{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":"<host>","agents":["<agent_id>", ...]}}
//
// 1 to MaxPullAgents distinct agent ids of the named host, whose
// heartbeats the author cannot pull: the host puts them on gossip again
// (Config.OnWanted). Any node may author one; a node forwards at most
// wantedPerWindow of one author per wantedWindow. A node lists
// WantedProtocol when it sends them, and a host keeps heartbeats nobody
// asked for off gossip only on topics whose every known peer lists it
// (Requestable). Nodes of v1.2 and earlier ignore the message.
//
// Every pubsub message is signed by its author's host key (pubsub's
// StrictSign), and the validator requires the author to be the peer_id
// the record or beat names, so only the host of an agent can speak for it
// over gossip.
//
// The message id is base64url(SHA-256(uvarint(len(topic)) ‖ topic ‖
// uvarint(len(from)) ‖ from ‖ data)): a content hash bound to the author
// and the topic (see MessageID).
//
// # Validation
//
// The topic validator checks, in order: size; I-JSON; protocol_version
// (an unsupported major is ignored, a newer minor accepted with one
// warning per peer); the envelope and the record or beat fields; scene
// membership on scene topics; the signatures and the peer binding
// (trust.Verifier.VerifyAgent with From = author, VerifyBeat with the
// author); then, for messages from other nodes, whether the message is
// news (Sink.CheckAnnounce / CheckBeat). A heartbeat whose author is its
// peer is first judged on the pubsub signature alone (record.
// BeatSignerAuthor, checkByAuthor): its own signature is verified only
// when the sink refuses it as that peer's statement. Failures every node judges alike
// — malformed, too_large, unsigned, bad_signature, bad_peer_signature,
// peer_mismatch, scene_mismatch — are rejected, which costs the peer that
// forwarded the message score (P4); failures that depend on local state
// or policy — unsupported_version, unknown_key, replay, expired,
// not_yet_valid, not_allowlisted, key_mismatch, certificate reasons,
// internal — are ignored without penalty. Malformed content under a newer
// minor version is ignored too. Every refusal is counted in
// agentd_validation_rejects_total{transport="gossip",reason}, every
// accepted message from another node in agentd_gossip_delivered_total.
//
// A beat whose agent key is unknown triggers Sink.UnknownAgent (at most
// once per agent per backoff, off the validator), so the node fetches the
// record over /agentd/record/1.0.0.
//
// Before any of that, pubsub verifies the message's own signature; a copy
// identical to one still waiting for that check is dropped first (the
// copy gate, copygate.go), so a node behind on its CPU does not verify
// each mesh peer's copy of one message.
//
// # Sync protocol /agentd/sync/1.0.0 and 1.1.0
//
// One request and one answer per stream, each an unsigned-varint length
// followed by that many bytes of JSON:
//
//	request: {"protocol_version":"v1.0","limit":N[,"shards":[...]]}  (≤ 10 KiB; 0 ≤ N ≤ 10000)
//	answer:  {"protocol_version":"v1.0","records":[<record.Announce>...],
//	          "heard":[{"age_ms":A,"interval_ms":I}...]}
//	     or  {"protocol_version":"v1.0","records":[],"heard":[],"error":{"code":"ErrRateLimited","message":"..."}}
//
// The responder sends at most min(N, its SyncLimit) records (N = 0 means
// its SyncLimit) of its live view; heard[i] says how long ago it last
// heard from the agent of records[i] (0 for agents it hosts) and the
// heartbeat interval that agent announced (0 if none), each 0..86400000.
// The requester reads at most N × (32 KiB + 1 KiB) + 4 KiB, verifies
// every record, and starts the agent's liveness clock at the freshest age
// any neighbour reported, not at the moment of the sync: an agent that
// died before the sync times out at the joiner when it does everywhere
// else.
//
// # Heartbeat pull /agentd/heartbeat/1.0.0
//
// Pull asks an agent's host for the newest heartbeats it published of
// the given agents, when gossip has been silent about them for two
// intervals (the node decides when; see PullProtocol for the wire format).
// The answer is unsigned: the connection authenticates the host, and each
// entry is judged as its statement (record.BeatSignerBatch), then by the
// sink like any heartbeat. A node serves pulls when Config.LatestBeats is
// set.
//
// # Lifecycle
//
// New builds the router (pubsub starts its own loops, bound to the
// context given to New); Start joins the announce topic; Close leaves the
// topics, stops the router and waits for every goroutine this package
// started. Scoring parameters and their reasons are in config.go and
// docs/protocol.md.
package gossip
