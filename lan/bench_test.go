package lan

import (
	"net/netip"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/miekg/dns"
)

// benchLAN is a LAN built but not started (sends are dropped), with the
// rate limits out of the way, and one remote agent whose key is pinned.
func benchLAN(b *testing.B) (*LAN, *trust.Identity, *record.SignedAgent) {
	b.Helper()
	id, err := trust.Generate()
	if err != nil {
		b.Fatal(err)
	}
	ver, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig()
	cfg.RatePerSource, cfg.RateBurst = 1e9, 1e9
	l, err := New(cfg, Deps{Identity: id, Verifier: ver, Metrics: metrics.New(false), Net: newMemNet().host("10.0.0.1")})
	if err != nil {
		b.Fatal(err)
	}
	remote, err := trust.Generate()
	if err != nil {
		b.Fatal(err)
	}
	a := &record.Agent{AgentName: "remote", Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.2:9000"},
		Skills: []record.Skill{skill("skill-r", record.SkillTool, nil, "cap-r")}}
	a.Fill(remote.AgentID, remote.PeerID.String(), remote.PublicKeyPEM(), 1, time.Now(), time.Hour)
	sa, err := remote.Sign(a)
	if err != nil {
		b.Fatal(err)
	}
	if err := ver.VerifyAgent(sa, trust.VerifyOptions{}); err != nil {
		b.Fatal(err)
	}
	l.remember(sa, netip.MustParseAddr("10.0.0.2"))
	return l, remote, sa
}

// BenchmarkHandleHeartbeat is the cost of one verified SKILL_HEARTBEAT:
// parse, replay check, ECDSA verification, table update.
func BenchmarkHandleHeartbeat(b *testing.B) {
	l, remote, sa := benchLAN(b)
	src := netip.MustParseAddrPort("10.0.0.2:54321")
	now := time.Now()
	msgs := make([][]byte, b.N)
	for i := range msgs {
		m := record.SkillMessage{Type: record.MsgSkillHeartbeat, AgentID: sa.Agent.AgentID, SkillID: "skill-r",
			Status: record.StatusHealthy, Timestamp: now.UnixMilli() + int64(i)}
		if err := m.SignECDSA(remote.AgentKey); err != nil {
			b.Fatal(err)
		}
		text, _ := m.Format()
		msgs[i] = []byte(text)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.udp.handle(msgs[i], src, now)
	}
	b.StopTimer()
	if got := counterValue(l.m.LANPackets.WithLabelValues(mechUDP, "accepted")); got != float64(b.N) {
		b.Fatalf("accepted %v of %d", got, b.N)
	}
}

// BenchmarkHandleMalformed is the cost of refusing a datagram that does not
// parse.
func BenchmarkHandleMalformed(b *testing.B) {
	l, _, _ := benchLAN(b)
	src := netip.MustParseAddrPort("10.0.0.9:54321")
	msg := []byte("SKILL_HEARTBEAT:agent-001;skill;NOT-A-STATUS;1707868800000;sig")
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.udp.handle(msg, src, now)
	}
}

// BenchmarkMDNSAnswerBrowse is the cost of answering a browse query for a
// node hosting one agent.
func BenchmarkMDNSAnswerBrowse(b *testing.B) {
	l, _, _ := benchLAN(b)
	id := l.d.Identity
	a := &record.Agent{AgentName: "bench", Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"},
		Skills: []record.Skill{skill("s", record.SkillTool, nil, "c")}}
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), 1, time.Now(), time.Hour)
	sa, err := id.Sign(a)
	if err != nil {
		b.Fatal(err)
	}
	l.mdns.publish([]*hostedAgent{{rec: sa, hash: sa.Hash(), canSign: true}})
	s := discardSocket{}
	q, _ := query("_agentsc._tcp.local.", dns.TypePTR).Pack()
	src := netip.MustParseAddrPort("10.0.0.9:5353")
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.mdns.handle(s, q, src, 1, now)
	}
	b.StopTimer()
	if got := counterValue(l.m.LANPackets.WithLabelValues(mechMDNS, "query_answered")); got != float64(b.N) {
		b.Fatalf("answered %v of %d", got, b.N)
	}
}

// discardSocket drops what is sent.
type discardSocket struct{}

func (discardSocket) ReadFrom([]byte) (int, netip.AddrPort, int, error) { select {} }
func (discardSocket) Multicast([]byte, int) error                       { return nil }
func (discardSocket) WriteTo([]byte, netip.AddrPort, int) error         { return nil }
func (discardSocket) LocalAddrs(int) []netip.Addr {
	return []netip.Addr{netip.MustParseAddr("10.0.0.1")}
}
func (discardSocket) Interfaces() []int { return []int{1} }
func (discardSocket) Sync() error       { return nil }
func (discardSocket) Close() error      { return nil }
