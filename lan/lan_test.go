package lan

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

func udpOnly(c *Config)  { c.MDNS.Enabled = false }
func mdnsOnly(c *Config) { c.UDP.Enabled = false }

// Two nodes with both mechanisms on find each other's agents within
// seconds, with nothing configured: mDNS points each at the other's record,
// which is fetched from the other's peer and verified.
func TestMutualDiscovery(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", nil)
		b := newNode(t, n, "10.0.0.2", nil)
		ra := a.host("alpha", 1, skill("skill-a", record.SkillTool, nil, "cap-a"))
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		startInOrder(a, b)
		eventually(t, 3*time.Second, "mutual discovery", func() bool {
			return a.learnedRec(rb.Agent.AgentID) != nil && b.learnedRec(ra.Agent.AgentID) != nil
		})
		if got := a.learnedRec(rb.Agent.AgentID); got.Hash() != rb.Hash() {
			t.Fatalf("a learnt another record of b")
		}
		if ok, why := a.lan.Available(); !ok {
			t.Fatalf("not available: %s", why)
		}
	})
}

// With mDNS off, a SKILL_REGISTER of an unknown agent is held while its
// record is resolved through the node (view, cache, DHT), then verified
// with the pinned key.
func TestUDPUnknownAgentResolved(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", udpOnly)
		b := newNode(t, n, "10.0.0.2", udpOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		a.mu.Lock()
		a.known[rb.Agent.AgentID] = rb // as if gossip or the DHT had it
		a.mu.Unlock()
		startInOrder(a, b)
		eventually(t, 2*time.Second, "a learns b", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		if a.counter(mechUDP, "resolved") < 1 {
			t.Fatal("the record was not resolved")
		}
		// Later heartbeats verify with the pinned key.
		eventually(t, 12*time.Second, "verified heartbeats", func() bool { return a.counter(mechUDP, "accepted") >= 2 })
	})
}

// Without any way to obtain the record, the agent is not learnt and the
// datagrams are counted as unresolved. The first failure is retried at the
// next heartbeat (it is often a dial that lost a race); further ones back
// off, doubling to UnknownBackoff (10 s), so that not every heartbeat
// (every 5 s) starts a resolution.
func TestUDPUnknownAgentUnresolved(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", udpOnly)
		b := newNode(t, n, "10.0.0.2", udpOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		startInOrder(a, b)
		eventually(t, 2*time.Second, "unresolved", func() bool { return a.counter(mechUDP, "unresolved") >= 1 })
		time.Sleep(6 * time.Second) // virtual: one heartbeat round, after the first back-off (1–1.5 s)
		synctestWait()
		if got := a.counter(mechUDP, "unresolved"); got != 2 {
			t.Fatalf("unresolved after one heartbeat round = %v, want 2 (retried once)", got)
		}
		time.Sleep(60 * time.Second) // virtual: 12 more heartbeats
		synctestWait()
		if a.learnedRec(rb.Agent.AgentID) != nil {
			t.Fatal("learnt a record nobody could provide")
		}
		// Failures at about 0, 5, 10, 15–20, 25–35 s, then every 10–15 s:
		// 7 to 9 in 66 s, against 14 heartbeats.
		if got := a.counter(mechUDP, "unresolved"); got < 6 || got > 10 {
			t.Fatalf("unresolved after 66 s = %v, want 6–10 (back-off doubling to 10 s)", got)
		}
		if a.rejects(mechUDP, "unknown_key") < 2 {
			t.Fatal("the held datagrams were not counted as unknown_key")
		}
	})
}

// A record fetch that fails once, as a dial that lost a TCP simultaneous
// open to the peer dialling back does, is retried within seconds, not
// after UnknownBackoff (10 s): the failure behind a flaky
// TestProcessesInNamespaces.
func TestMDNSFetchRetriedSoonAfterAFailure(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		b := newNode(t, n, "10.0.0.2", mdnsOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		n.failFetches(b.id.PeerID, 1)
		start := time.Now()
		startInOrder(a, b)
		eventually(t, 9*time.Second, "a learns b after a failed fetch", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		if a.counter(mechMDNS, "fetch_failed") != 1 {
			t.Fatalf("fetch_failed = %v, want 1", a.counter(mechMDNS, "fetch_failed"))
		}
		t.Logf("learnt %s after the start (virtual)", time.Since(start))
	})
}

// An unregister on shutdown is seen by the other side: Forget is called
// once, even though one SKILL_UNREGISTER per skill arrives twice, and the
// mDNS goodbye follows.
func TestUnregisterOnClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", nil)
		b := newNode(t, n, "10.0.0.2", nil)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"), skill("skill-c", record.SkillTool, nil, "cap-c"))
		startInOrder(a, b)
		eventually(t, 3*time.Second, "a learns b", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		if err := b.lan.Close(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "a forgets b", func() bool { return a.forgotten(rb.Agent.AgentID) >= 1 })
		time.Sleep(3 * time.Second)
		synctestWait()
		if got := a.forgotten(rb.Agent.AgentID); got != 1 {
			t.Fatalf("Forget called %d times, want 1", got)
		}
		if a.counter(mechUDP, "unregister") < 2 {
			t.Fatalf("unregister datagrams = %v", a.counter(mechUDP, "unregister"))
		}
	})
}

// An mDNS goodbye alone (UDP off) removes the agent, after the RFC 6762
// one-second grace.
func TestMDNSGoodbye(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		b := newNode(t, n, "10.0.0.2", mdnsOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		startInOrder(a, b)
		eventually(t, 3*time.Second, "a learns b", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		b.lan.Unregister(context.Background(), rb.Agent.AgentID, record.ReasonMaintenance)
		start := time.Now()
		eventually(t, 3*time.Second, "a forgets b", func() bool { return a.forgotten(rb.Agent.AgentID) == 1 })
		if d := time.Since(start); d < time.Second {
			t.Fatalf("forgotten after %s, before the goodbye grace", d)
		}
		if a.counter(mechMDNS, "goodbye") < 1 {
			t.Fatal("goodbye not counted")
		}
	})
}

// Discovery by capability through SKILL_DISCOVER: the requester does not
// know the responder's agent (its registrations are lost), sends a
// SKILL_DISCOVER, maps the response to the peer at the responder's address
// and returns only the verified record.
func TestDiscoverThroughSkillDiscover(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		n.drop = func(b []byte, src netip.AddrPort) bool {
			s := string(b)
			return strings.HasPrefix(s, "SKILL_REGISTER:") || strings.HasPrefix(s, "SKILL_HEARTBEAT:")
		}
		a := newNode(t, n, "10.0.0.1", udpOnly)
		b := newNode(t, n, "10.0.0.2", udpOnly)
		c := newNode(t, n, "10.0.0.3", udpOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillEnterprise, []string{"auth"}, "org-data-read", "user-auth"))
		c.host("gamma", 1, skill("skill-c", record.SkillTool, nil, "web-search"))
		// a knows b's peer at b's address (as libp2p mDNS would tell it).
		a.lan.peers.add(b.id.PeerID, nil, time.Now())
		a.lan.peers.mu.Lock()
		a.lan.peers.m[b.id.PeerID].ips = []netip.Addr{b.h.ip}
		a.lan.peers.mu.Unlock()
		startInOrder(a, b)
		c.start()
		eventually(t, time.Second, "sockets up", func() bool {
			ok, _ := a.lan.Available()
			return ok
		})
		time.Sleep(100 * time.Millisecond)
		signed, foreign, err := a.lan.Discover(context.Background(), store.Filter{Capability: "org-data-read", Scene: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		if len(signed) != 1 || signed[0].Agent.AgentID != rb.Agent.AgentID || len(foreign) != 0 {
			t.Fatalf("Discover = %d signed %d foreign, want b's record", len(signed), len(foreign))
		}
		if b.counter(mechUDP, "discover_answered") != 1 || c.counter(mechUDP, "discover_no_match") != 1 {
			t.Fatalf("b answered %v, c no-match %v", b.counter(mechUDP, "discover_answered"), c.counter(mechUDP, "discover_no_match"))
		}
		// A capability nobody offers: nothing, after the timeout.
		start := time.Now()
		signed, _, err = a.lan.Discover(context.Background(), store.Filter{Capability: "nope"})
		if err != nil || len(signed) != 0 {
			t.Fatalf("Discover(nope) = %v, %v", signed, err)
		}
		if d := time.Since(start); d != DefaultDiscoverTimeout {
			t.Fatalf("Discover took %s of virtual time, want the %s timeout", d, DefaultDiscoverTimeout)
		}
	})
}

// A Limit ends Discover as soon as enough records are found.
func TestDiscoverLimitReturnsEarly(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", nil)
		b := newNode(t, n, "10.0.0.2", nil)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		startInOrder(a, b)
		eventually(t, 3*time.Second, "a knows b", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		start := time.Now()
		signed, _, err := a.lan.Discover(context.Background(), store.Filter{Capability: "cap-b", Limit: 1})
		if err != nil || len(signed) != 1 {
			t.Fatalf("Discover = %d, %v", len(signed), err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("Discover waited %s with its limit already reached", time.Since(start))
		}
	})
}

// When no socket can be opened, LAN discovery says so, Discover fails with
// ErrUnavailable, and the socket is retried until it works.
func TestUnavailableAndRetry(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", func(c *Config) { c.RetryInterval = 10 * time.Second })
		a.h.setFail(errors.New("no multicast-capable interface: interface \"eth9\" is down"))
		a.start()
		synctestWait()
		ok, why := a.lan.Available()
		if ok || !strings.Contains(why, "udp: no multicast-capable interface") || !strings.Contains(why, "mdns: ") {
			t.Fatalf("Available = %v %q", ok, why)
		}
		if _, _, err := a.lan.Discover(context.Background(), store.Filter{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Discover error = %v, want ErrUnavailable", err)
		}
		a.h.setFail(nil)
		eventually(t, 11*time.Second, "retry", func() bool { ok, _ := a.lan.Available(); return ok })
		if a.counter(mechUDP, "socket_down") != 1 {
			t.Fatalf("socket_down = %v, want 1", a.counter(mechUDP, "socket_down"))
		}
	})
}

// Turning both mechanisms off leaves a LAN that says why it is off.
func TestDisabled(t *testing.T) {
	n := newMemNet()
	a := newNode(t, n, "10.0.0.1", func(c *Config) { c.UDP.Enabled, c.MDNS.Enabled = false, false })
	a.start()
	if ok, why := a.lan.Available(); ok || why != "disabled by configuration" {
		t.Fatalf("Available = %v %q", ok, why)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"group":        func(c *Config) { c.UDP.MulticastGroup = "10.0.0.1" },
		"port":         func(c *Config) { c.UDP.Port = 70000 },
		"mdns port":    func(c *Config) { c.UDP.Port = 5353 },
		"timeout":      func(c *Config) { c.UDP.Timeout = config.Duration(time.Second) },
		"ttl":          func(c *Config) { c.MDNS.TTL = config.Duration(2 * time.Hour) },
		"service":      func(c *Config) { c.ServiceType = "agentsc.tcp" },
		"service long": func(c *Config) { c.ServiceType = "_abcdefghijklmnop._tcp" },
		"libp2p":       func(c *Config) { c.Libp2pServiceName = "_p2p._sctp" },
		"requester":    func(c *Config) { c.RequesterID = "a;b" },
	} {
		t.Run(name, func(t *testing.T) {
			c := testConfig()
			mod(&c)
			id := newIdentity(t)
			if _, err := New(c, Deps{Identity: id, Verifier: newVerifier(t)}); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// Close is idempotent and every caller returns only once the goroutines
// stopped; Start after Close fails.
func TestCloseConcurrentAndIdempotent(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", nil)
		a.host("alpha", 1, skill("skill-a", record.SkillTool, nil, "cap-a"))
		a.start()
		synctestWait()
		done := make(chan struct{}, 2)
		for range 2 {
			go func() {
				_ = a.lan.Close()
				done <- struct{}{}
			}()
		}
		<-done
		<-done
		if err := a.lan.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.lan.Start(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Close = %v", err)
		}
		if ok, why := a.lan.Available(); ok || why != "closed" {
			t.Fatalf("Available after Close = %v %q", ok, why)
		}
	})
}
