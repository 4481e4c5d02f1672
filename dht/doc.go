// Package dht is agentd's wide-area discovery: a Kademlia DHT (go-libp2p-kad-dht)
// under its own protocol prefix, provider records for skill keys, a small
// stream protocol to fetch a provider's signed record with a fresh
// challenge, and signed agent records stored as DHT values.
//
// # Kademlia
//
// The DHT speaks /agentd/kad/1.0.0 (ProtocolPrefix "/agentd"), so it never
// mixes with the IPFS Amino DHT. The mode is one of three:
//
//   - server (the zero Config): answers queries and stores records;
//   - client (Config.ClientMode): queries and provides, serves nothing;
//   - auto (Config.AutoMode, the daemon's default): kad-dht's
//     ModeAutoServer, a server until AutoNAT reports the node private; with
//     Config.AutoClientFirst (a node whose bootstrap peers are public)
//     kad-dht's ModeAuto, a client until AutoNAT reports it public.
//
// kad-dht's own default, ModeAuto, is not used: it stays a client until
// AutoNAT reports public reachability, which never happens on a LAN or on
// loopback, and every routing table then stays empty. ModeAutoServer keeps
// such networks working (reachability stays unknown there: AutoNAT servers
// refuse to dial back private addresses) while a node behind a NAT on the
// internet, which nobody could dial, leaves the other nodes' routing
// tables. Status.ClientMode reports the mode in force. The only validator
// is the "agentd" namespace (Validator); the /pk and /ipns defaults are
// gone.
//
// # Provider records
//
// Every skill key of every hosted record (record.Agent.DHTKeys: "skill:cap",
// "*:cap" and "skill:*") is provided as CIDv1(raw, sha2-256 multihash of
// SHA-256(preimage)); only the multihash travels on the wire. Provider
// records live ProvideValidity (default 10 min) on the servers and are
// reprovided every ReprovideInterval (default 3 min), so a provider that
// stops is forgotten by the DHT within 10 min, not kad-dht's default 48 h.
// Provide is implemented here (GetClosestPeers, then ADD_PROVIDER to each)
// so the number of peers that accepted the record is known: kad-dht's own
// Provide returns nil even when no remote stored anything.
// In a network of fewer than k (20) servers one lookup meets them all, and
// its answer stands in for the next ones for a minute (smallNet).
//
// The DHT is a hint, never the truth. Find returns a provider only when its
// record, fetched now over RecordProtocol, verifies through the
// trust.Verifier and offers what was asked, or when the local live view
// (Config.Live) knows the agent alive.
//
// # Record fetch protocol /agentd/record/1.0.0
//
// One request and one response per stream. Each message is a frame: an
// unsigned varint (LEB128, minimal encoding) byte length, then that many
// bytes of UTF-8 JSON. A request frame is at most MaxRequestBytes (4 KiB), a
// response frame at most MaxResponseBytes (256 KiB); a larger length prefix
// is refused before any body byte is read.
//
// Request (querier → provider):
//
//	{"protocol_version":"v1.0","nonce":"<base64 of 32 random bytes>",
//	 "agent_id":"<uuid>","skill":"<skill id>","capability":"<capability id>"}
//
// agent_id, skill and capability are optional filters (absent or "" matches
// all). Response (provider → querier):
//
//	{"protocol_version":"v1.0","records":[{"announce":{<seed-000 Announce>},
//	 "signer":"agent"|"peer","challenge_signature":"<base64>"}],
//	 "error":{"code":"ErrRateLimited","message":"..."}}
//
// records holds at most MaxRecordsPerResponse (16) entries; error is
// present only when the provider refused the request. The challenge bytes
// are
//
//	"agentd-record-challenge/v1\n" || nonce (32 bytes)
//	|| requester peer id (binary multihash) || responder peer id (binary multihash)
//	|| SHA-256(canonical agent object)
//
// Peer ids are self-delimiting multihashes, so the concatenation is
// unambiguous. With signer "agent" the signature is ECDSA P-256 over
// SHA-256(challenge), ASN.1 DER (record.SignBytes), checked against the
// record's public_key; with signer "peer" it is the responder's Ed25519
// libp2p key over the challenge, checked against the stream's remote peer
// key. A captured response is useless for any other nonce, requester or
// responder.
//
// # DHT values
//
// Signed records are stored with PutValue under "/agentd/<agent-id>" for
// every hosted agent and "/agentd/<peer-id>" for the node's own agent. The
// value is the record's Announce JSON. Validator accepts a value only if
// it parses, both signatures verify, the key names the record (agent_id or
// peer_id, exact string) and the record has not expired; Select prefers the
// highest seq and returns the first of equal ones, so an identical
// republish refreshes the stored copy. A value is put at once when its
// record changes (a hosted record is signed again with a quarter of its
// TTL left, after 45 min by default); the republish round, every
// RepublishInterval (default 1 h), puts again the values not put within
// the last interval; and servers drop a value ValueMaxAge (default 3 h)
// after they last received it. A reader also drops a record past its own
// issued_at + ttl_seconds.
package dht
