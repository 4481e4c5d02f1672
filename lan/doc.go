// Package lan is agentd's zero-configuration LAN discovery: two agentd on
// one network, started with no flags, find each other and each other's
// skills within seconds, and interoperate with the mDNS tools people
// already run (Avahi, dns-sd). Three mechanisms run side by side, each
// optional:
//
//   - the seed-001 text protocol on UDP multicast (224.0.0.1:54321);
//   - DNS-SD on mDNS: an instance of _agentsc._tcp.local. per hosted agent
//     whose TXT record is a pointer to its signed record;
//   - libp2p's own mDNS peer discovery under "_agentd._udp", which connects
//     the libp2p hosts.
//
// Nothing learnt on the LAN is trusted by itself. What reaches the node
// (Deps.Learn) is always a full signed record that trust.Verifier accepted:
// obtained from the node (Deps.Resolve: live view, cache, DHT value) or
// fetched over /agentd/record/1.0.0 (Deps.Fetch) from the libp2p peer the
// LAN pointed at. UDP datagrams of agentd agents are ECDSA-signed by the
// agent key and verified with the key pinned for the agent id; the mDNS
// TXT summary is unsigned and only says where the record is and which
// hash it has.
//
// # UDP multicast (seed 001 §5)
//
// One socket bound to the port on the wildcard address (SO_REUSEADDR,
// SO_REUSEPORT, IP_MULTICAST_ALL off), joined to the group on the chosen
// interface or on every up, multicast-capable interface with an IPv4
// address; IP TTL 1, multicast loopback on. Messages are the seed-001 lines
// of record/skilltext.go, one per datagram, at most 8 KiB:
//
//	SKILL_REGISTER:{agentId};{skillId};{version};{skillType};{endpoint};{caps};{scenes};{ts};{sig}
//	SKILL_HEARTBEAT:{agentId};{skillId};{status};{ts};{sig}
//	SKILL_STATUS:{agentId};{skillId};{status};{ts};{sig}
//	SKILL_UNREGISTER:{agentId};{skillId};{reason};{ts};{sig}
//	SKILL_DISCOVER:{requesterId};{capabilityFilter};{sceneFilter};{typeFilter};{ts}
//	SKILL_DISCOVER_RESPONSE:{requesterId};{skill}|...;{skill}|...;{ts}
//	SKILL_REGISTER_ACK:{agentId};{status};{message};{ts}
//
// What a node sends, for each hosted agent whose record carries the
// identity's agent key (a record its client signed with another key is
// advertised by mDNS only, as the node cannot sign for it):
//
//   - SKILL_HEARTBEAT per skill every broadcastInterval (5 s), with the
//     status SetStatus last set (HEALTHY by default);
//   - SKILL_REGISTER per skill every max(broadcastInterval, timeout/2)
//     (15 s), at once when a record is new or changed (Refresh), when the
//     socket comes up, and when a newcomer appears on the LAN (at most once
//     a second), so that the newcomer learns the LAN in one round trip;
//   - SKILL_STATUS per skill when SetStatus is called;
//   - SKILL_UNREGISTER per skill, twice 100 ms apart, on Unregister and on
//     Close (reason SHUTDOWN), and when an agent disappears from Locals;
//   - SKILL_DISCOVER_RESPONSE, multicast, answering a SKILL_DISCOVER with
//     its own hosted skills that match (every listed capability, every
//     listed scene, one of the listed types; empty filters match all);
//     nothing when none match; at most 2 answers per second (burst 4) per
//     source;
//   - SKILL_REGISTER_ACK, multicast, answering a SKILL_REGISTER: SUCCESS
//     for a verified registration of a skill not registered before,
//     DUPLICATE for one already held (a replay or retransmission), INVALID
//     for one that does not parse or whose timestamp is outside the clock
//     window, UNAUTHORIZED for a bad, missing or unverifiable signature; at
//     most one per second per agent and status. A registration whose
//     agent's record is still being obtained is acknowledged when it is.
//
// Signatures are the seed's (§10.1): base64 SHA256withECDSA (ASN.1 DER)
// over the line without ";{sig}", by the agent key. Timestamps are epoch
// milliseconds, strictly increasing per sender. With a shared key
// (discovery.udp.hmacKey) the seed's HMAC form (64 lowercase hex digits of
// HMAC-SHA256 over the same text) is accepted too: such skills of other
// implementations go to a table of "foreign" skills that Discover returns
// as record.Agent values with agent_id ExternalAgentID("seed001", agentId)
// and no signature.
//
// Receiving: every datagram is size-checked (longer than 8 KiB + CRLF:
// oversize), rate-limited per source address (100/s, burst 200), parsed
// (strictly: the parser accepts only what it would format), and dropped
// when it is one of this node's own. A signed message must carry a
// timestamp within MaxClockSkew (5 min) of the local clock, newer than the
// last one accepted for the same agent, skill and type (an UNREGISTER also
// no older than the skill's newest message). An ECDSA message of an agent
// whose key is not pinned is held (at most 8 per agent) while a worker
// obtains the agent's record (Resolve, then Fetch from the libp2p peers
// known at the datagram's source address), verifies it, and then the held
// datagrams with its key; failures back off from about 1 s, doubling to
// UnknownBackoff (10 s): the first failure is often a dial that lost a
// race, such as a TCP simultaneous open with a peer dialling at once.
// The record is learnt only once a datagram verifies with its key. An
// accepted UNREGISTER calls Deps.Forget once per agent; a later, newer
// registration revives it. A registration that no longer matches the held
// record, or a record that expires within the timeout, makes the worker
// obtain the newer record.
//
// The resolver's LAN step (Discover) multicasts a SKILL_DISCOVER with the
// filter's capability, scene and type, collects responses until
// DiscoverTimeout (1 s) or the context ends, and maps each listed skill to
// a verified record: one already held for an agent seen at the responder's
// address, or the records fetched from the libp2p peers at that address
// that offer it. A response is a hint; only verified records are returned.
//
// # DNS-SD on mDNS (seed 000 §3.1, §5.1; RFC 6762, RFC 6763)
//
// A socket on 224.0.0.251:5353 (IPv4; IP TTL 255) shared with any other
// responder of the host. Each hosted agent is published as
//
//	<agent_name>-<first 8 hex digits of agent_id>._agentsc._tcp.local.   (the agent id alone without a name)
//	  PTR  _agentsc._tcp.local. -> instance              TTL discovery.mdns.ttl (10 s)
//	  SRV  instance -> agentd-<8 hex of SHA-256(peer id)>.local.:<libp2p TCP port>
//	  TXT  txtvers=1 pv=v1.0 id=<agent_id> peer=<peer_id> h=<base64url SHA-256 of the canonical record> seq=<n> [caps=<c1,c2,...>]
//	  A    agentd-....local. -> the interface's IPv4 addresses   TTL max(ttl, 120 s)
//
// The TXT data stays within 400 bytes and 255 bytes per string; caps is
// present only when the whole list fits (see Summary). The responder
// answers PTR queries for the service (SRV, TXT and A as additional
// records, known-answer suppression), SRV/TXT/ANY queries for an instance,
// A queries for its host name, and _services._dns-sd._udp.local.; unicast
// when asked (QU) and in the legacy unicast form for queries not from port
// 5353. It announces an instance twice, one second apart, when it appears
// or its TXT changes (cache-flush bits on SRV, TXT and A), and sends a
// goodbye (TTL 0) on Unregister and Close. Instance names embed the agent
// id, so agentd does not probe for or defend them.
//
// The browser caches every instance of the service seen in any response
// (from port 5353): its SRV, TXT and the A records of its target (or the
// response's source address), with their TTLs. It queries the service at
// once, then at 1, 2, 4 ... seconds up to 30 s, and any instance at 80% of
// its TTL (RFC 6762 §5.2), with known answers. A complete instance with a
// valid summary is acted on: when the record with that hash is already
// held and the response came from an address the agent was verified at,
// the agent is learnt again (proof of life); otherwise a worker
// obtains the record the summary points at (from the node, else fetched
// from the summary's peer at the instance's address and port) and accepts
// it only if it verifies and its hash is h (or its seq is newer). A
// goodbye (TTL 0 PTR or SRV) from the instance's own address removes the
// instance after one second unless it is re-announced (RFC 6762 §10.1),
// and calls Deps.Forget; an instance whose TTL lapses is dropped silently.
//
// Why agentd's own responder and browser rather than libp2p/zeroconf
// v2.2.0 (which it uses, through go-libp2p, for libp2p's mDNS): zeroconf's
// Server.SetText writes the TXT while its receive goroutines read it
// without a lock (a data race on every record change), its responder does
// not answer queries for its host name, and its Browse reports an instance
// once — never a removal, a goodbye or a changed TXT.
//
// # Availability
//
// A mechanism whose socket cannot be opened (the interface does not exist,
// is down, has multicast off or no IPv4 address, or permission is denied)
// is logged once at warn level, reported by Available, and retried every
// RetryInterval (30 s); the interfaces are re-read as often, so one that
// comes up later is joined. LAN discovery is available while one enabled
// mechanism is up; the rest of agentd works without it.
//
// # Metrics
//
// agentd_lan_packets_total{mechanism="udp"|"mdns"|"lan", outcome} counts
// datagrams by what became of them (accepted, held, resolved, unresolved,
// replay, stale, own, malformed, oversize, rate_limited, bad_signature,
// unsigned, unknown_key, foreign, unregister, discover_answered,
// discover_no_match, response, sent_<type>, ack_sent_<status>, fetched,
// refreshed, refresh_unproven, fetch_failed, goodbye, goodbye_refused, expired, txt_invalid,
// query_answered, announce_sent, goodbye_sent, socket_up, socket_down,
// queue_full, ...); refused inputs are also counted in
// agentd_validation_rejects_total{transport="udp"|"mdns", reason}.
package lan
