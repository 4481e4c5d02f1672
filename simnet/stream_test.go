package simnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	bconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

const testProto = protocol.ID("/meshsub/1.1.0")

// twoHosts links nodes 0 and 1 with 20 ms ± 0 and returns their simHosts.
func twoHosts(t *testing.T) (*simNet, *simHost, *simHost) {
	t.Helper()
	n := newSimNet(Scenario{Seed: 1, Latency: 20 * time.Millisecond})
	var hs []*simHost
	for i := range 2 {
		id, err := identityFor(1, i)
		if err != nil {
			t.Fatal(err)
		}
		h, err := n.host(i, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.attach(i); err != nil {
			t.Fatal(err)
		}
		cm, err := bconnmgr.NewConnManager(1, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cm.Close() })
		hs = append(hs, &simHost{Host: h, idx: i, t: &traffic{}, net: n, cm: cm})
	}
	t.Cleanup(func() {
		if err := n.close(); err != nil {
			t.Error(err)
		}
	})
	return n, hs[0], hs[1]
}

func TestStreamLatencyIsPipelined(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, a, b := twoHosts(t)
		type arrival struct {
			at time.Time
			n  int
		}
		got := make(chan arrival, 64)
		done := make(chan []byte, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			var all bytes.Buffer
			buf := make([]byte, 4096)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					all.Write(buf[:n])
					got <- arrival{time.Now(), all.Len()}
				}
				if err != nil {
					done <- all.Bytes()
					return
				}
			}
		})
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		msg := bytes.Repeat([]byte{'x'}, 1000)
		for i := range 20 {
			msg[0] = byte(i)
			if _, err := s.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		data := <-done
		if len(data) != 20000 {
			t.Fatalf("received %d bytes, want 20000", len(data))
		}
		for i := range 20 {
			if data[i*1000] != byte(i) {
				t.Fatalf("message %d out of order", i)
			}
		}
		close(got)
		var last arrival
		for a := range got {
			last = a
		}
		// Twenty writes at once arrive one latency later, not twenty.
		if d := last.at.Sub(start); d != 20*time.Millisecond {
			t.Fatalf("all data arrived after %s, want 20ms", d)
		}
		if tt := a.t.snapshot(); tt.Msgs[classGossip] != 20 || tt.Out[classGossip] != 20000 {
			t.Fatalf("sender counted %d msgs, %d bytes", tt.Msgs[classGossip], tt.Out[classGossip])
		}
		if tt := b.t.snapshot(); tt.In[classGossip] != 20000 {
			t.Fatalf("receiver counted %d bytes", tt.In[classGossip])
		}
		if _, err := s.Write(msg); !errors.Is(err, errStreamClosed) {
			t.Fatalf("write after CloseWrite: %v", err)
		}
		_ = s.Close()
	})
}

func TestStreamResetDropsWhatIsInFlight(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, a, b := twoHosts(t)
		first := make(chan string, 1)
		res := make(chan error, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) {
			buf := make([]byte, 5)
			if _, err := io.ReadFull(s, buf); err != nil {
				res <- err
				return
			}
			first <- string(buf)
			rest, err := io.ReadAll(s)
			if err == nil {
				err = errors.New("clean end: " + string(rest))
			}
			res <- err
		})
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if got := <-first; got != "hello" {
			t.Fatalf("got %q", got)
		}
		// In flight for 20 ms when the stream is reset: never delivered.
		if _, err := s.Write([]byte("never delivered")); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		if err := <-res; err == nil || !errors.Is(err, network.ErrReset) {
			t.Fatalf("reader: %v, want a reset", err)
		}
		if _, err := s.Write([]byte("x")); err == nil {
			t.Fatal("write after reset succeeded")
		}
	})
}

func TestLinksFollowUpDownAndPartitions(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newSimNet(Scenario{Seed: 2, Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond})
		defer func() {
			if err := n.close(); err != nil {
				t.Error(err)
			}
		}()
		var ids []peer.ID
		for i := range 4 {
			id, err := identityFor(2, i)
			if err != nil {
				t.Fatal(err)
			}
			h, err := n.host(i, id)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, h.ID())
			if err := n.attach(i); err != nil {
				t.Fatal(err)
			}
		}
		if got := n.nLinked.Load(); got != 6 {
			t.Fatalf("%d links among 4 up hosts, want 6", got)
		}
		for a := range 4 {
			for b := range 4 {
				l := n.linkLatency(a, b)
				if l < 15*time.Millisecond || l > 25*time.Millisecond || l != n.linkLatency(b, a) {
					t.Fatalf("latency %d-%d = %s", a, b, l)
				}
			}
		}
		connect := func(a, b int) error {
			_, err := n.nets[a].dial(ids[b])
			return err
		}
		if err := connect(0, 3); err != nil {
			t.Fatal(err)
		}
		n.split(map[int]int{2: 1, 3: 1})
		if n.nLinked.Load() != 2 || !n.partitioned() || n.sideOf(3) != 1 {
			t.Fatalf("after the split: %d links", n.nLinked.Load())
		}
		if len(n.nets[0].ConnsToPeer(ids[3])) != 0 || len(n.nets[3].ConnsToPeer(ids[0])) != 0 {
			t.Fatal("a connection across the partition survived")
		}
		if err := connect(0, 3); err == nil {
			t.Fatal("dialled across the partition")
		}
		if err := connect(0, 1); err != nil {
			t.Fatal(err)
		}
		if err := n.heal(); err != nil {
			t.Fatal(err)
		}
		if n.nLinked.Load() != 6 || n.partitioned() {
			t.Fatal("heal did not relink")
		}
		n.detach(1)
		if n.nLinked.Load() != 3 || len(n.nets[0].ConnsToPeer(ids[1])) != 0 {
			t.Fatal("a detached host kept links or connections")
		}
		if err := connect(0, 1); err == nil {
			t.Fatal("dialled a detached host")
		}
		if err := n.attach(1); err != nil || n.nLinked.Load() != 6 {
			t.Fatalf("reattach: %v, %d links", err, n.nLinked.Load())
		}
	})
}

// TestDeliveryTimeIsRoundedUp: deliveries land on whole milliseconds,
// never earlier than the link's latency and less than 1 ms later.
func TestDeliveryTimeIsRoundedUp(t *testing.T) {
	base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct{ now, lat, want time.Duration }{
		{0, 20 * time.Millisecond, 20 * time.Millisecond},
		{1, 20 * time.Millisecond, 21 * time.Millisecond},
		{300 * time.Microsecond, 19*time.Millisecond + 700*time.Microsecond, 20 * time.Millisecond},
		{300 * time.Microsecond, 19*time.Millisecond + 701*time.Microsecond, 21 * time.Millisecond},
	} {
		if got := deliveryTime(base.Add(c.now), c.lat).Sub(base); got != c.want {
			t.Errorf("write at +%s over %s: delivered at +%s, want +%s", c.now, c.lat, got, c.want)
		}
	}
}
