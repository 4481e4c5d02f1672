package simnet

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	bconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// protoClass groups libp2p protocols for the traffic report.
type protoClass int32

const (
	classDHT protoClass = iota
	classGossip
	classSync
	classRecord
	classLiveness
	classOther
	nClasses
)

var classNames = [nClasses]string{"dht", "gossip", "sync", "record", "liveness", "other"}

func classify(p protocol.ID) protoClass {
	s := string(p)
	switch {
	case strings.Contains(s, "/kad/"):
		return classDHT
	case strings.HasPrefix(s, "/meshsub/"), strings.HasPrefix(s, "/floodsub/"):
		return classGossip
	case strings.HasPrefix(s, "/agentd/sync/"):
		return classSync
	case strings.HasPrefix(s, "/agentd/record/"):
		return classRecord
	case strings.HasPrefix(s, "/agentd/probe/"), strings.HasPrefix(s, "/agentd/heartbeat/"):
		return classLiveness // early failure detection's probes, heartbeat pulls
	}
	return classOther
}

// traffic counts what one virtual node writes to and reads from its
// libp2p streams. A message is one Write call on a stream: GossipSub,
// Kademlia and agentd's own protocols write each framed message with one
// call. Bytes are application bytes; multistream-select negotiation,
// identify, and the transport's own framing and encryption (which mocknet
// does not have) are not counted.
type traffic struct {
	msgs, out, in [nClasses]atomic.Int64
}

type trafficTotals struct {
	Msgs, Out, In [nClasses]int64
}

func (t *traffic) snapshot() trafficTotals {
	var s trafficTotals
	for i := range nClasses {
		s.Msgs[i], s.Out[i], s.In[i] = t.msgs[i].Load(), t.out[i].Load(), t.in[i].Load()
	}
	return s
}

func (s *trafficTotals) add(o trafficTotals) {
	for i := range nClasses {
		s.Msgs[i] += o.Msgs[i]
		s.Out[i] += o.Out[i]
		s.In[i] += o.In[i]
	}
}

func (s trafficTotals) sub(o trafficTotals) trafficTotals {
	for i := range nClasses {
		s.Msgs[i] -= o.Msgs[i]
		s.Out[i] -= o.Out[i]
		s.In[i] -= o.In[i]
	}
	return s
}

func (s trafficTotals) sum() (msgs, out, in int64) {
	for i := range nClasses {
		msgs += s.Msgs[i]
		out += s.Out[i]
		in += s.In[i]
	}
	return msgs, out, in
}

// simHost is what one node instance sees of its host: every stream opened
// through it or handed to a handler registered on it is counted, and
// ConnManager is a real connection manager with agentd's production
// watermarks (the basic host under it has none), so pubsub's and the
// DHT's tags and protections work as in production.
type simHost struct {
	host.Host
	idx int
	t   *traffic
	net *simNet
	cm  *bconnmgr.BasicConnMgr
}

var _ host.Host = (*simHost)(nil)

// ConnManager returns the node's connection manager.
func (h *simHost) ConnManager() connmgr.ConnManager { return h.cm }

// NewStream opens a counted, delayed stream.
func (h *simHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return h.wrap(s), nil
}

// SetStreamHandler registers a handler that receives counted, delayed
// streams.
func (h *simHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(s network.Stream) { handler(h.wrap(s)) })
}

// SetStreamHandlerMatch is SetStreamHandler with a protocol matcher.
func (h *simHost) SetStreamHandlerMatch(pid protocol.ID, m func(protocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, m, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *simHost) wrap(s network.Stream) network.Stream {
	cs := &simStream{Stream: s, t: h.t}
	cs.class.Store(-1)
	return cs
}

// simStream counts a stream's traffic by protocol class. The latency,
// bandwidth and loss of the link are the network's (memStream).
type simStream struct {
	network.Stream
	t     *traffic
	class atomic.Int32
}

func (s *simStream) classOf() protoClass {
	if c := s.class.Load(); c >= 0 {
		return protoClass(c)
	}
	p := s.Protocol()
	c := classify(p)
	if p != "" {
		s.class.Store(int32(c))
	}
	return c
}

func (s *simStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if n > 0 {
		s.t.in[s.classOf()].Add(int64(n))
	}
	return n, err
}

func (s *simStream) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c := s.classOf()
	s.t.msgs[c].Add(1)
	s.t.out[c].Add(int64(len(p)))
	return s.Stream.Write(p)
}
