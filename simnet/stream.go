package simnet

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	classOther
	nClasses
)

var classNames = [nClasses]string{"dht", "gossip", "sync", "record", "other"}

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

// simHost is what one node instance sees of its mocknet host: every stream
// opened through it or handed to a handler registered on it is counted
// and delayed by the link's latency, and ConnManager is a real connection
// manager with agentd's production watermarks (mocknet hosts have none),
// so pubsub's and the DHT's tags and protections work as in production.
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
	cs := &simStream{Stream: s, t: h.t, latency: h.net.latencyTo(h.idx, s.Conn().RemotePeer()), net: h.net}
	if h.net.loss > 0 {
		cs.loss = h.net.loss
		cs.rng = rand.New(rand.NewPCG(h.net.seed, h.net.streams.Add(1)))
	}
	cs.class.Store(-1)
	cs.cond = sync.NewCond(&cs.mu)
	h.net.track(cs)
	return cs
}

// maxInFlight bounds the bytes one stream direction holds in flight (a
// socket send buffer); a writer beyond it blocks.
const maxInFlight = 1 << 20

var errStreamClosed = errors.New("simnet: stream closed for writing")

// simStream counts a stream's traffic and delays what is written on it by
// the link latency while keeping any number of writes in flight, as a
// network does: each write is queued with its due time and a flusher
// goroutine, started on demand and gone when the queue is empty, writes
// what is due to the underlying mocknet stream (which has no latency of
// its own).
type simStream struct {
	network.Stream
	t       *traffic
	class   atomic.Int32
	latency time.Duration
	net     *simNet    // owns the flushers: its close resets and waits for them
	loss    float64    // Scenario.Loss
	rng     *rand.Rand // draws the losses (under mu)

	mu         sync.Mutex
	cond       *sync.Cond
	q          []chunk
	queued     int
	flushing   bool
	err        error
	closeAfter bool // CloseWrite once the queue drains
}

type chunk struct {
	data []byte
	due  time.Time
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
	if s.latency <= 0 {
		return s.Stream.Write(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.err == nil && !s.closeAfter && s.queued >= maxInFlight {
		s.cond.Wait()
	}
	switch {
	case s.err != nil:
		return 0, s.err
	case s.closeAfter:
		return 0, errStreamClosed
	}
	s.q = append(s.q, chunk{data: append([]byte(nil), p...), due: deliveryTime(time.Now(), s.latency+s.retransmitDelay(len(p)))})
	s.queued += len(p)
	if !s.flushing {
		s.flushing = true
		s.net.flushStart(s)
		go func() {
			defer s.net.flushDone(s)
			s.flush()
		}()
	}
	return len(p), nil
}

// Packet loss model (Scenario.Loss).
const (
	mtu        = 1400
	minRTO     = 200 * time.Millisecond // Linux's TCP_RTO_MIN
	maxRetries = 6
)

// retransmitDelay is what losses add to a write of n bytes: for each of
// its packets lost, a retransmission timeout that doubles while the
// retransmission is lost too. The flusher writes in order, so a delayed
// write holds back the writes behind it, as TCP does. s.mu is held.
func (s *simStream) retransmitDelay(n int) time.Duration {
	if s.loss <= 0 {
		return 0
	}
	var worst time.Duration
	for range (n + mtu - 1) / mtu {
		var d time.Duration
		rto := max(minRTO, 2*s.latency)
		for try := 0; try < maxRetries && s.rng.Float64() < s.loss; try++ {
			d += rto
			rto *= 2
		}
		worst = max(worst, d)
	}
	return worst
}

// deliveryStep is the resolution of delivery times.
const deliveryStep = time.Millisecond

// deliveryTime is when a write made at now arrives over a link with the
// given latency: now+latency rounded up to a whole deliveryStep of the
// clock (less than 1 ms added to a 20 ms link). In virtual time the clock
// moves from one pending timer to the next, each step costing a pass of
// the scheduler over the whole simulation; with links of random
// nanosecond latencies nearly every message had a step of its own, and
// rounded ones share steps.
func deliveryTime(now time.Time, latency time.Duration) time.Time {
	due := now.Add(latency)
	if t := due.Truncate(deliveryStep); t.Before(due) {
		return t.Add(deliveryStep)
	}
	return due
}

// flush writes queued chunks when they are due, coalescing those due
// together into one write, until the queue is empty.
func (s *simStream) flush() {
	var buf []byte
	for {
		s.mu.Lock()
		if len(s.q) == 0 || s.err != nil {
			s.flushing = false
			s.q, s.queued = nil, 0
			closeAfter := s.closeAfter && s.err == nil
			s.cond.Broadcast()
			s.mu.Unlock()
			if closeAfter {
				_ = s.Stream.CloseWrite()
			}
			return
		}
		wait := time.Until(s.q[0].due)
		s.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		s.mu.Lock()
		now := time.Now()
		buf = buf[:0]
		n := 0
		for n < len(s.q) && !s.q[n].due.After(now) {
			buf = append(buf, s.q[n].data...)
			n++
		}
		s.q = s.q[n:]
		s.queued -= len(buf)
		s.cond.Broadcast()
		s.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := s.Stream.Write(buf); err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	}
}

// CloseWrite closes the write side once everything written has been
// delivered (without waiting for that).
func (s *simStream) CloseWrite() error {
	s.mu.Lock()
	if s.flushing {
		s.closeAfter = true
		s.cond.Broadcast()
		s.mu.Unlock()
		return nil
	}
	s.closeAfter = true
	s.mu.Unlock()
	return s.Stream.CloseWrite()
}

// Close closes the read side at once and the write side once the queue
// has drained.
func (s *simStream) Close() error {
	s.net.untrack(s)
	err := s.CloseRead()
	return errors.Join(err, s.CloseWrite())
}

// Reset drops what is in flight and resets the stream.
func (s *simStream) Reset() error {
	s.net.untrack(s)
	s.drop(network.ErrReset)
	return s.Stream.Reset()
}

// ResetWithError drops what is in flight and resets the stream.
func (s *simStream) ResetWithError(code network.StreamErrorCode) error {
	s.net.untrack(s)
	s.drop(network.ErrReset)
	return s.Stream.ResetWithError(code)
}

// abort resets a stream whose flusher may be stuck (the far end stopped
// reading and the connection was never closed).
func (s *simStream) abort() {
	s.drop(network.ErrReset)
	_ = s.Stream.Reset()
}

func (s *simStream) drop(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.q, s.queued = nil, 0
	s.cond.Broadcast()
}
