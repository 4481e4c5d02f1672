package simnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
)

// TestMemStreamHalfClose: CloseWrite delivers EOF after the data, the
// other direction stays open, CloseRead makes the far end's writes fail,
// and a stream closed both ways leaves its connection's list.
func TestMemStreamHalfClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, a, b := twoHosts(t)
		got := make(chan string, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			data, err := io.ReadAll(s)
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- string(data)
			if _, err := s.Write([]byte("reply")); err != nil {
				got <- "error: " + err.Error()
				return
			}
			_ = s.Close()
		})
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != "request" {
			t.Fatalf("far end read %q", g)
		}
		reply, err := io.ReadAll(s)
		if err != nil || string(reply) != "reply" {
			t.Fatalf("reply %q, %v", reply, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, h := range []*simHost{a, b} {
			for _, c := range h.Network().Conns() {
				if n := len(c.GetStreams()); n != 0 {
					t.Fatalf("%d streams left on a connection after both ends closed", n)
				}
			}
		}

		// CloseRead: the far end's writes fail.
		fail := make(chan error, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			var err error
			for err == nil {
				_, err = s.Write([]byte("x"))
				time.Sleep(10 * time.Millisecond)
			}
			fail <- err
		})
		s, err = a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("go")); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseRead(); err != nil {
			t.Fatal(err)
		}
		if err := <-fail; !errors.Is(err, errStreamClosed) {
			t.Fatalf("write after the reader closed: %v", err)
		}
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, errReadClosed) {
			t.Fatalf("read after CloseRead: %v", err)
		}
		_ = s.Reset()
	})
}

// TestMemConnCloseResetsStreams: closing a connection resets its streams
// at both ends, both networks forget it, and the connectedness events
// come once per peer (first connection, last connection).
func TestMemConnCloseResetsStreams(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, a, b := twoHosts(t)
		sub, err := a.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Close() }()
		started := make(chan struct{})
		res := make(chan error, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			if _, err := io.ReadFull(s, make([]byte, len("in flight"))); err != nil {
				res <- err
				return
			}
			close(started)
			_, err := io.ReadAll(s)
			res <- err
		})
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("in flight")); err != nil {
			t.Fatal(err)
		}
		if e := (<-sub.Out()).(event.EvtPeerConnectednessChanged); e.Connectedness != network.Connected || e.Peer != b.ID() {
			t.Fatalf("first event %+v", e)
		}
		// A second stream reuses the connection: no new event.
		s2, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(a.Network().ConnsToPeer(b.ID())); n != 1 {
			t.Fatalf("%d connections for two streams", n)
		}
		<-started
		if err := a.Network().ClosePeer(b.ID()); err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, network.ErrReset) {
			t.Fatalf("far end of a closed connection: %v", err)
		}
		if _, err := s2.Write([]byte("x")); !errors.Is(err, network.ErrReset) {
			t.Fatalf("write on a closed connection: %v", err)
		}
		if e := (<-sub.Out()).(event.EvtPeerConnectednessChanged); e.Connectedness != network.NotConnected {
			t.Fatalf("second event %+v", e)
		}
		if a.Network().Connectedness(b.ID()) == network.Connected || b.Network().Connectedness(a.ID()) == network.Connected {
			t.Fatal("a closed connection is still counted")
		}
		select {
		case e := <-sub.Out():
			t.Fatalf("extra event %+v", e)
		default:
		}
	})
}

// TestMemStreamLossKeepsOrder: under loss, retransmission delays hold
// back later writes (in-order delivery, as TCP) and nothing is lost.
func TestMemStreamLossKeepsOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newSimNet(Scenario{Seed: 3, Latency: 20 * time.Millisecond, Loss: 0.3})
		defer func() {
			if err := n.close(); err != nil {
				t.Error(err)
			}
		}()
		var hs []*peerNet
		for i := range 2 {
			id, err := identityFor(3, i)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.host(i, id); err != nil {
				t.Fatal(err)
			}
			if err := n.attach(i); err != nil {
				t.Fatal(err)
			}
			hs = append(hs, n.nets[i])
		}
		done := make(chan []byte, 1)
		hs[1].SetStreamHandler(func(s network.Stream) {
			data, _ := io.ReadAll(s)
			done <- data
		})
		c, err := hs[0].dial(hs[1].peer)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.NewStream(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var want []byte
		for i := range 200 {
			want = append(want, byte(i))
			if _, err := s.Write([]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		_ = s.CloseWrite()
		data := <-done
		if string(data) != string(want) {
			t.Fatalf("received %v, want 0..199 in order", data)
		}
		// With 30 % loss some write was retransmitted at least once.
		if d := time.Since(start); d < 20*time.Millisecond+minRTO {
			t.Fatalf("200 writes under 30 %% loss arrived after %s: no retransmission modelled", d)
		}
	})
}

// TestMemStreamCarriesEveryByte: writes of every size — many within one
// millisecond, which join one chunk, some beyond a pooled buffer — arrive
// whole and in order on two streams at once, while both recycle chunk
// buffers.
func TestMemStreamCarriesEveryByte(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, a, b := twoHosts(t)
		const total = 3 << 20 // beyond maxInFlight: writers wait for the readers, and buffers are reused meanwhile
		payload := func(seed byte) []byte {
			p := make([]byte, total)
			for i := range p {
				p[i] = byte(i*7) ^ seed
			}
			return p
		}
		got := make(chan []byte, 2)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			// Small reads: most chunks are taken in several parts.
			var data []byte
			buf := make([]byte, 37)
			for {
				n, err := s.Read(buf)
				data = append(data, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					break
				}
			}
			got <- data
			_ = s.Close()
		})
		sizes := []int{1, 3, 100, 2047, 2048, 2049, 700, 5000, 9, 1500}
		send := func(seed byte) {
			s, err := a.NewStream(context.Background(), b.ID(), testProto)
			if err != nil {
				t.Error(err)
				return
			}
			p := payload(seed)
			for i, k := 0, 0; i < len(p); k++ {
				n := min(sizes[k%len(sizes)], len(p)-i)
				if _, err := s.Write(p[i : i+n]); err != nil {
					t.Error(err)
					return
				}
				i += n
				if k%3 == 0 {
					time.Sleep(time.Millisecond) // the next writes start a new chunk
				}
			}
			_ = s.CloseWrite()
		}
		go send(1)
		go send(2)
		for range 2 {
			data := <-got
			if len(data) != total {
				t.Fatalf("read %d bytes, want %d", len(data), total)
			}
			seed := data[0]
			if want := payload(seed); !bytes.Equal(data, want) {
				i := 0
				for data[i] == want[i] {
					i++
				}
				t.Fatalf("stream %d: byte %d is %d, want %d", seed, i, data[i], want[i])
			}
		}
	})
}

// TestHalfKeepsAChunkUntilRead: a chunk's pooled buffer is not reused
// while part of it is unread — a write between two partial reads gets a
// buffer of its own.
func TestHalfKeepsAChunkUntilRead(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sn := newSimNet(Scenario{})
		defer sn.alarm.close()
		h := newHalf(&memLink{latency: int64(time.Millisecond)}, sn)
		first, second := bytes.Repeat([]byte("a"), 100), bytes.Repeat([]byte("b"), 100)
		if _, err := h.write(first); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		buf := make([]byte, 200)
		n, err := h.read(buf[:10])
		if err != nil || n != 10 {
			t.Fatalf("first read: %d, %v", n, err)
		}
		if _, err := h.write(second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		for n < 200 {
			k, err := h.read(buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		if want := append(first, second...); !bytes.Equal(buf, want) {
			t.Fatalf("read %q, want %q", buf, want)
		}
	})
}
