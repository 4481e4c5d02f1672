package simnet

import (
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// errStreamClosed is what a write gets once the stream's write side, or
// the far end's read side, is closed.
var errStreamClosed = errors.New("simnet: stream closed for writing")

// errReadClosed is what a read gets after CloseRead.
var errReadClosed = errors.New("simnet: stream closed for reading")

// maxInFlight bounds the bytes one stream direction holds in flight (a
// socket send buffer); a writer beyond it blocks until the reader has
// taken some.
const maxInFlight = 1 << 20

// memStream is one end of a stream: it reads from one half and writes to
// the other, which are the far end's write and read halves.
type memStream struct {
	id       int64
	conn     *memConn
	in, out  *half
	far      *memStream
	protocol atomic.Pointer[protocol.ID]
	stat     network.Stats

	// wroteDone and readDone record the local CloseWrite and the end of reading
	// (EOF, CloseRead); the stream leaves its connection's list once both
	// are done, or at a reset.
	wroteDone, readDone atomic.Bool
}

var _ network.Stream = (*memStream)(nil)

func newStreamPair(c *memConn) (local, remote *memStream) {
	l := c.link
	ab, ba := newHalf(l, c.net.sn), newHalf(l, c.net.sn)
	local = &memStream{id: memStreamIDs.Add(1), conn: c, in: ba, out: ab, stat: network.Stats{Direction: network.DirOutbound}}
	remote = &memStream{id: memStreamIDs.Add(1), conn: c.remote, in: ab, out: ba, stat: network.Stats{Direction: network.DirInbound}}
	local.far, remote.far = remote, local
	return local, remote
}

func (s *memStream) ID() string                  { return strconv.FormatInt(s.id, 10) }
func (s *memStream) Conn() network.Conn          { return s.conn }
func (s *memStream) Stat() network.Stats         { return s.stat }
func (s *memStream) Scope() network.StreamScope  { return &network.NullScope{} }
func (s *memStream) SetDeadline(time.Time) error { return nil }
func (s *memStream) SetReadDeadline(time.Time) error {
	return nil
}
func (s *memStream) SetWriteDeadline(time.Time) error { return nil }

func (s *memStream) Protocol() protocol.ID {
	if p := s.protocol.Load(); p != nil {
		return *p
	}
	return ""
}

func (s *memStream) SetProtocol(p protocol.ID) error {
	s.protocol.Store(&p)
	return nil
}

func (s *memStream) Read(b []byte) (int, error) {
	n, err := s.in.read(b)
	if err == io.EOF {
		s.readDone.Store(true)
		s.maybeDone()
	}
	return n, err
}

func (s *memStream) Write(p []byte) (int, error) { return s.out.write(p) }

// CloseWrite sends EOF after what was written.
func (s *memStream) CloseWrite() error {
	s.out.closeWrite()
	s.wroteDone.Store(true)
	s.maybeDone()
	return nil
}

// CloseRead discards what arrives from now on; the far end's writes
// fail.
func (s *memStream) CloseRead() error {
	s.in.closeRead()
	s.readDone.Store(true)
	s.maybeDone()
	return nil
}

func (s *memStream) Close() error {
	_ = s.CloseRead()
	return s.CloseWrite()
}

// Reset aborts both directions at both ends at once.
func (s *memStream) Reset() error {
	s.resetBoth()
	s.conn.removeStream(s)
	s.far.conn.removeStream(s.far)
	return nil
}

// ResetWithError is Reset; the code is not carried.
func (s *memStream) ResetWithError(network.StreamErrorCode) error { return s.Reset() }

func (s *memStream) resetBoth() {
	s.in.reset()
	s.out.reset()
}

func (s *memStream) maybeDone() {
	if s.wroteDone.Load() && s.readDone.Load() {
		s.conn.removeStream(s)
	}
}

// half is one direction of a stream: bytes queued by the writer with the
// time they arrive, taken by the reader once due, in order.
type half struct {
	latency time.Duration
	link    *memLink
	loss    float64
	alarm   *alarm

	mu       sync.Mutex
	writable *sync.Cond // a writer waits for room (maxInFlight)
	readable chan struct{}
	q        []chunk
	off      int // bytes of q[0] already read
	queued   int
	lastDue  time.Time
	eof      bool  // the writer closed: EOF once q is empty
	rerr     error // reads fail (reset, CloseRead)
	werr     error // writes fail (reset, CloseWrite, the reader's CloseRead)
	rng      *rand.Rand
}

type chunk struct {
	data   []byte
	due    time.Time
	pooled *[]byte // data's array is chunkBufs' (returned when read), or nil
}

// keptChunks is the most queue slots an emptied half keeps for its next
// writes.
const keptChunks = 4

// chunkCap is the capacity of a pooled chunk buffer: most writes (an RPC
// frame, a length prefix) are below it.
const chunkCap = 2 << 10

// chunkBufs recycles the buffers of chunks once read. Copying each write
// into a new slice, and growing it when the next write of the same
// millisecond joined it, was 3.7 % of a 100-node real-time run's CPU.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, chunkCap); return &b }}

// newChunk holds a copy of p, due at due.
func newChunk(p []byte, due time.Time) chunk {
	if len(p) > chunkCap {
		return chunk{data: append([]byte(nil), p...), due: due}
	}
	bp := chunkBufs.Get().(*[]byte)
	return chunk{data: append((*bp)[:0], p...), due: due, pooled: bp}
}

// add appends p to c: in place while the pooled buffer has room, else in
// a new slice (and the pooled buffer goes back).
func (c *chunk) add(p []byte) {
	if c.pooled != nil && len(c.data)+len(p) > cap(c.data) {
		grown := append(make([]byte, 0, 2*(len(c.data)+len(p))), c.data...)
		c.release()
		c.data = append(grown, p...)
		return
	}
	c.data = append(c.data, p...)
}

// release returns c's pooled buffer; c must not be used after.
func (c *chunk) release() {
	if c.pooled != nil {
		*c.pooled = c.data[:0]
		chunkBufs.Put(c.pooled)
		c.pooled = nil
	}
}

func newHalf(l *memLink, sn *simNet) *half {
	h := &half{latency: time.Duration(l.latency), link: l, loss: sn.loss, alarm: sn.alarm, readable: make(chan struct{}, 1)}
	h.writable = sync.NewCond(&h.mu)
	if h.loss > 0 {
		h.rng = rand.New(rand.NewPCG(sn.seed, sn.streams.Add(1)))
	}
	return h
}

// wakeReader tells a waiting reader that something changed. h.mu is held.
func (h *half) wakeReader() {
	select {
	case h.readable <- struct{}{}:
	default:
	}
}

func (h *half) write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var delay time.Duration
	if h.link.limiter != nil {
		delay = h.link.limiter.Limit(len(p))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.werr == nil && h.queued >= maxInFlight {
		h.writable.Wait()
	}
	if h.werr != nil {
		return 0, h.werr
	}
	due := deliveryTime(time.Now(), h.latency+delay+h.retransmitDelay(len(p)))
	if due.Before(h.lastDue) {
		due = h.lastDue // in order: a late write holds back those behind it
	}
	h.lastDue = due
	if n := len(h.q); n > 0 && h.q[n-1].due.Equal(due) {
		h.q[n-1].add(p)
	} else {
		h.q = append(h.q, newChunk(p, due))
	}
	h.queued += len(p)
	h.wakeReader()
	return len(p), nil
}

// read returns what is due, waiting for the first byte's arrival.
func (h *half) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		h.mu.Lock()
		if h.rerr != nil {
			err := h.rerr
			h.mu.Unlock()
			return 0, err
		}
		if len(h.q) == 0 {
			eof := h.eof
			h.mu.Unlock()
			if eof {
				return 0, io.EOF
			}
			<-h.readable
			continue
		}
		now := time.Now()
		if due := h.q[0].due; due.After(now) {
			h.mu.Unlock()
			h.alarm.at(due, h.readable)
			<-h.readable // the alarm, or a write, close or reset
			continue
		}
		n := 0
		for n < len(b) && len(h.q) > 0 && !h.q[0].due.After(now) {
			c := h.q[0].data[h.off:]
			k := copy(b[n:], c)
			n += k
			if k == len(c) {
				// Shift down rather than reslice: the queue is a chunk or
				// two, and its array then serves the next writes
				// instead of a new one each time it empties.
				h.q[0].release()
				last := copy(h.q, h.q[1:])
				h.q[last] = chunk{}
				h.q = h.q[:last]
				h.off = 0
			} else {
				h.off += k
			}
		}
		if len(h.q) == 0 && cap(h.q) > keptChunks {
			h.q = nil // a burst's array is not kept by an idle stream
		}
		h.queued -= n
		h.writable.Broadcast()
		h.mu.Unlock()
		return n, nil
	}
}

func (h *half) closeWrite() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.eof = true
	if h.werr == nil {
		h.werr = errStreamClosed
	}
	h.writable.Broadcast()
	h.wakeReader()
}

func (h *half) closeRead() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail(errReadClosed, errStreamClosed)
}

func (h *half) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail(network.ErrReset, network.ErrReset)
}

// fail ends the half for both ends and drops what is in flight. h.mu is
// held. A first error stays.
func (h *half) fail(rerr, werr error) {
	if h.rerr == nil {
		h.rerr = rerr
	}
	if h.werr == nil || h.werr == errStreamClosed && werr == network.ErrReset {
		h.werr = werr
	}
	for i := range h.q {
		h.q[i].release()
	}
	h.q, h.off, h.queued = nil, 0, 0
	h.writable.Broadcast()
	h.wakeReader()
}

// Packet loss model (Scenario.Loss).
const (
	mtu        = 1400
	minRTO     = 200 * time.Millisecond // Linux's TCP_RTO_MIN
	maxRetries = 6
)

// retransmitDelay is what losses add to a write of n bytes: for each of
// its packets lost, a retransmission timeout that doubles while the
// retransmission is lost too. Writes arrive in order, so a delayed write
// holds back the writes behind it, as TCP does. h.mu is held.
func (h *half) retransmitDelay(n int) time.Duration {
	if h.loss <= 0 {
		return 0
	}
	var worst time.Duration
	for range (n + mtu - 1) / mtu {
		var d time.Duration
		rto := max(minRTO, 2*h.latency)
		for try := 0; try < maxRetries && h.rng.Float64() < h.loss; try++ {
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
