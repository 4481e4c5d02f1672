// Package simnet runs many complete agentd nodes in one process over an
// in-memory libp2p network (memnet.go: go-libp2p's basic host over a
// network.Network of simnet's own whose streams need no goroutine), breaks the network on a
// schedule, checks every discovery answer against ground truth, and reports
// what discovery achieved and what it cost.
//
// Each virtual node is a real node.Node — DHT, GossipSub, live view,
// in-memory Badger store, resolver; LAN discovery off — on an in-memory host
// whose links carry a configurable latency, per-link jitter and bandwidth.
// Nodes join through a few bootstrap nodes (bootstrap.StartNode). The
// harness knows at every instant which agents are alive, what each offers
// and which side of a partition it is on, and scores each lookup against
// that truth at the moment the query was issued.
//
// One Scenario runs in both clocks: the Go tests run it inside a
// testing/synctest bubble, where time is virtual (a two-minute scenario
// takes seconds and timers are deterministic), and `agentd simnet` runs the
// same code in real time. Every random choice — the capability catalog, the
// Zipf draws of skills and queries, who queries what and when, which nodes
// leave, crash, restart or join, link jitter, the node identities — comes
// from sources derived from Scenario.Seed, so the schedule and the sequence
// of live sets are identical for one seed; only network timing varies
// between real-time runs.
//
// Measurements (docs/simnet.md explains each):
//   - recall: live providers returned ÷ live providers that exist (reachable
//     from the querier), pooled over queries;
//   - stale rate: returned providers dead for longer than the liveness
//     timeout ÷ returned providers;
//   - lookup latency p50/p95/p99 by the source that answered;
//   - gossip propagation: publish-to-delivery time of every gossip message
//     at every other node (a pubsub raw tracer);
//   - time from a crash or leave until every surviving node dropped the
//     agent, and from a join until every node saw it;
//   - messages and bytes per node per second on every libp2p stream
//     (a host wrapper counts application writes and reads);
//   - goroutines and heap per node, RSS, CPU seconds.
package simnet
