package lan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

// netns is a network namespace created by a test (internal/testutil).
type netns = testutil.Netns

// newNetns creates a namespace, or skips the test loudly when the
// environment cannot (not root, no ip(8), no namespaces).
func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	return testutil.NewNetns(t, name, "this test of real multicast sockets", false)
}

// nsNetwork opens OSNetwork sockets inside a namespace.
type nsNetwork struct{ ns *netns }

func (n nsNetwork) ListenMulticast(group netip.AddrPort, ifName string, ttl int) (Socket, error) {
	var s Socket
	err := n.ns.Do(func() error {
		var err error
		s, err = OSNetwork{}.ListenMulticast(group, ifName, ttl)
		return err
	})
	if err != nil {
		return nil, err
	}
	return nsSocket{Socket: s, ns: n.ns}, nil
}

// nsSocket re-reads the interfaces inside the namespace.
type nsSocket struct {
	Socket
	ns *netns
}

func (s nsSocket) Sync() error { return s.ns.Do(s.Socket.Sync) }

// realNode is a LAN on real sockets inside ns, with the records of the
// memNet's peers served by Fetch.
func realNode(t *testing.T, n *memNet, ns *netns, ip string, mod func(*Config)) *tnode {
	t.Helper()
	return newNode(t, n, ip, func(c *Config) {
		c.Interface = "lan0"
		if mod != nil {
			mod(c)
		}
	}).withNet(nsNetwork{ns})
}

// Two LANs on real multicast sockets (UDP 224.0.0.1:54321 and mDNS
// 224.0.0.251:5353, SO_REUSEPORT, loopback) in a namespace find each
// other's agents; a datagram arriving on an interface that was not chosen
// is dropped; a missing or multicast-less interface is refused.
func TestOSNetworkInNamespace(t *testing.T) {
	t.Parallel()
	ns := newNetns(t, "agentd-lan-unit")
	ns.IP(t, "link", "set", "lo", "up")
	// Two veth pairs inside the namespace: lan0 and lan1 carry the
	// addresses, their peers only make the links come up.
	for i, name := range []string{"lan0", "lan1"} {
		ns.IP(t, "link", "add", name, "type", "veth", "peer", "name", name+"p")
		ns.IP(t, "link", "set", name+"p", "up")
		ns.IP(t, "link", "set", name, "up", "multicast", "on")
		ns.IP(t, "addr", "add", fmt.Sprintf("10.7%d.0.1/24", 7+i), "dev", name)
	}
	ns.IP(t, "route", "add", "224.0.0.0/4", "dev", "lan0")

	for _, c := range []struct{ ifName, want string }{
		{"nope0", "no multicast-capable interface"},
		{"lo", "has multicast off"},
	} {
		_, err := nsNetwork{ns}.ListenMulticast(netip.MustParseAddrPort("224.0.0.1:54321"), c.ifName, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("ListenMulticast(%s) error = %v, want %q", c.ifName, err, c.want)
		}
	}

	n := newMemNet()
	a := realNode(t, n, ns, "10.77.0.1", nil)
	b := realNode(t, n, ns, "10.77.0.1", nil)
	ra := a.host("alpha", 1, skill("skill-a", "tool-skill", nil, "cap-a"))
	rb := b.host("beta", 1, skill("skill-b", "tool-skill", nil, "cap-b"))
	a.start()
	b.start()
	eventually(t, 10*time.Second, "mutual discovery over real multicast", func() bool {
		return a.learnedRec(rb.Agent.AgentID) != nil && b.learnedRec(ra.Agent.AgentID) != nil
	})
	eventually(t, 10*time.Second, "a hears b on both mechanisms", func() bool {
		return a.counter(mechUDP, "accepted") > 0 && a.counter(mechMDNS, "fetched")+a.counter(mechMDNS, "refreshed") > 0
	})

	// A datagram out of lan1 (where the kernel is a member of 224.0.0.1
	// too) is not for a socket bound to lan0.
	send := func(ifName string) {
		t.Helper()
		s, err := nsNetwork{ns}.ListenMulticast(netip.MustParseAddrPort("224.0.0.1:54321"), ifName, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		if err := s.Multicast([]byte("not a seed-001 message"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// The lan1 datagram goes first, then one on lan0; once a second lan0
	// datagram has been counted, a stray lan1 one (sent before both) would
	// have been too.
	before := a.counter(mechUDP, "malformed")
	send("lan1")
	send("lan0")
	eventually(t, 5*time.Second, "the first lan0 datagram", func() bool { return a.counter(mechUDP, "malformed") > before })
	send("lan0")
	eventually(t, 5*time.Second, "the second lan0 datagram", func() bool { return a.counter(mechUDP, "malformed")-before >= 2 })
	if got := a.counter(mechUDP, "malformed") - before; got != 2 {
		t.Fatalf("%v malformed datagrams counted, want 2 (only the ones sent on lan0)", got)
	}
}
