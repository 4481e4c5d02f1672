// Package acceptance holds agentd's cross-transport acceptance tests: real
// nodes (package node) on an in-memory libp2p network (mocknet) and LAN
// discovery (package lan) on an in-memory multicast network, all in
// virtual time (testing/synctest), with a certificate-backed trust store
// (package trust). It has no non-test code.
//
// What they establish (seed 000 acceptance criteria 4 and 6, and key
// rotation, seed 000 §6.1):
//
//   - an agent whose certificate is revoked cannot register anywhere: its
//     announcements are refused on gossip, its record is refused when
//     fetched from a DHT provider or read as a DHT value, a registration
//     of it is refused by the node's registration path (what the API
//     calls), and the LAN never learns it;
//   - an agent id that is not allow-listed is refused by the registration
//     path with not_allowlisted (the API's 403 ErrForbidden) and ignored
//     on gossip, the DHT and the LAN;
//   - after a key rotation peers accept the new key at once, the old one
//     until the grace period ends, then refuse it (key_retired).
package acceptance
