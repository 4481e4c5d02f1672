package lan

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/miekg/dns"
)

// fuzzNow is the clock of the fuzz targets: the seed's example timestamp,
// so that corpus entries carrying it pass the clock-skew check and reach
// the signature checks.
var fuzzNow = time.UnixMilli(1707868800000)

const fuzzHMACKey = "fuzz-key"

// fuzzLANs returns a constructor of LANs that are built but not started:
// handle runs inline, and sends are counted as send_unavailable. Each fuzz
// iteration gets a fresh one, so that no state (rate limits, replay
// windows) carries over and an interesting input stays interesting while
// it is minimised.
func fuzzLANs(f *testing.F) func(t *testing.T) *LAN {
	f.Helper()
	id, err := trust.Generate()
	if err != nil {
		f.Fatal(err)
	}
	m := metrics.New(false)
	return func(t *testing.T) *LAN {
		v, err := trust.NewVerifier(trust.Config{Now: func() time.Time { return fuzzNow }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.UDP.HMACKey = fuzzHMACKey
		l, err := New(cfg, Deps{Identity: id, Verifier: v, Metrics: m, Net: newMemNet().host("10.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// FuzzUDPDatagram feeds arbitrary datagrams to the UDP packet handler. It
// must never panic; a datagram the seed-001 parser accepts must re-format
// to its own text; one it refuses must not touch the tables; the tables
// stay within their bounds.
func FuzzUDPDatagram(f *testing.F) {
	for _, s := range []string{
		"SKILL_REGISTER:agent-001;skill-org-feishu;0.7.0;enterprise-skill;192.168.1.100:8080;org-data-read,user-auth;auth;1707868800000;MEUCIQDxxx",
		"SKILL_DISCOVER:agent-002;org-data-read;auth;enterprise-skill;1707868800000",
		"SKILL_DISCOVER_RESPONSE:agent-002;skill-org-feishu|0.7.0|192.168.1.100:8080|org-data-read,user-auth|auth;skill-org-dingding|0.7.0|192.168.1.101:8080|org-data-read,user-auth|auth;1707868800000",
		"SKILL_HEARTBEAT:agent-001;skill-org-feishu;HEALTHY;1707868805000;MEUCIQDxxx",
		"SKILL_REGISTER_ACK:agent-001;SUCCESS;registered; ok;1707868800000",
		"SKILL_UNREGISTER:agent-001;skill-org-feishu;SHUTDOWN;1707868800000;",
		"SKILL_STATUS:3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d;s;DEGRADED;1707868800000;MEUCIQDxxx",
		"SKILL_REGISTER:agent-001;skill-x;1.0.0;tool-skill;10.0.0.2:8080;translate;;1707868800000;bm90IHJlYWxseSBERVI=;MEUCIQDxxx",
		"CHALLENGE_RESPONSE:agent-001;skill-x;0123456789abcdef0123456789abcdef;1707868800002;MEUCIQD",
		"JOIN_SCENE:agent-001;skill-x;auth;1707868800004;MEUCIQD",
		"SKILL_UNREGISTER_ACK:agent-001;skill-x;SUCCESS;unregistered;1707868800003",
		"JOIN_SCENE_RESPONSE:agent-001;auth;group-auth;SUCCESS;agent-001|skill-x|10.0.0.2:8080;1707868800005",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	var f0 []byte
	for _, m := range []record.SkillMessage{
		{Type: record.MsgSkillRegister, AgentID: "agent-001", SkillID: "skill-x", Version: "1.0.0", SkillType: record.SkillTool,
			Endpoint: "10.0.0.2:8080", Capabilities: []string{"translate"}, Timestamp: fuzzNow.UnixMilli()},
		{Type: record.MsgSkillHeartbeat, AgentID: "agent-001", SkillID: "skill-x", Status: record.StatusDegraded, Timestamp: fuzzNow.UnixMilli() + 1},
		{Type: record.MsgSkillUnregister, AgentID: "agent-001", SkillID: "skill-x", Reason: record.ReasonUpgrade, Timestamp: fuzzNow.UnixMilli() + 2},
	} {
		if err := m.SignHMAC([]byte(fuzzHMACKey)); err != nil {
			f.Fatal(err)
		}
		text, err := m.Format()
		if err != nil {
			f.Fatal(err)
		}
		if f0 == nil {
			f0 = []byte(text)
		}
		f.Add([]byte(text))
	}
	newLAN := fuzzLANs(f)
	src := netip.MustParseAddrPort("10.0.0.2:54321")
	f.Fuzz(func(t *testing.T, b []byte) {
		l := newLAN(t)
		// A registration of the same agent first, so that heartbeats,
		// statuses and unregisters meet a known skill.
		l.udp.handle(f0, src, fuzzNow)
		before := l.agents.len()
		l.foreign.mu.Lock()
		fbefore := len(l.foreign.m)
		l.foreign.mu.Unlock()
		l.udp.handle(b, src, fuzzNow)
		m, err := record.ParseSkillMessage(string(b))
		if err == nil {
			text, ferr := m.Format()
			want := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if ferr != nil || text != want {
				t.Fatalf("accepted datagram does not round-trip: %q -> %q (%v)", b, text, ferr)
			}
		} else {
			l.foreign.mu.Lock()
			fafter := len(l.foreign.m)
			l.foreign.mu.Unlock()
			if l.agents.len() != before || fafter != fbefore {
				t.Fatalf("a refused datagram changed the tables: %q", b)
			}
		}
		l.foreign.mu.Lock()
		n := len(l.foreign.m)
		l.foreign.mu.Unlock()
		if n > maxForeign || l.agents.len() > maxAgents {
			t.Fatal("table bound exceeded")
		}
	})
}

// FuzzParseTXT parses arbitrary TXT data (one string per line). An
// accepted summary must re-encode within the limits and parse back to
// itself (without the capabilities when they no longer fit).
func FuzzParseTXT(f *testing.F) {
	good, _ := goldenSummary().TXT()
	f.Add(strings.Join(good, "\n"))
	f.Add("txtvers=1\nid=" + goldenID + "\npeer=" + goldenPeer + "\nh=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\nseq=0")
	f.Add("TXTVERS=1\nflag\nid=x")
	f.Add("")
	f.Fuzz(func(t *testing.T, data string) {
		s, err := ParseTXT(strings.Split(data, "\n"))
		if err != nil {
			return
		}
		txt, err := s.TXT()
		if err != nil {
			t.Fatalf("accepted summary does not encode: %v", err)
		}
		if TXTSize(txt) > MaxTXTBytes {
			t.Fatalf("encoded summary is %d bytes", TXTSize(txt))
		}
		back, err := ParseTXT(txt)
		if err != nil {
			t.Fatalf("re-encoded summary does not parse: %v", err)
		}
		want := s
		if !strings.HasPrefix(txt[len(txt)-1], "caps=") {
			want.Capabilities = nil
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("round trip\n got %+v\nwant %+v", back, want)
		}
	})
}

// FuzzMDNSPacket feeds arbitrary mDNS packets to the responder and the
// browser. It must never panic, and the browser's cache stays within its
// bounds.
func FuzzMDNSPacket(f *testing.F) {
	txt, _ := goldenSummary().TXT()
	for _, m := range []*dns.Msg{
		query("_agentsc._tcp.local.", dns.TypePTR),
		query(servicesName, dns.TypePTR),
		query("agentd-00000000.local.", dns.TypeA),
		publication("beta", "h.local.", "10.0.0.2", 4777, txt, 120),
		publication("beta", "h.local.", "10.0.0.2", 4777, txt, 0),
	} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(5353))
	}
	f.Add([]byte{0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0}, uint16(5353))
	newLAN := fuzzLANs(f)
	id, err := trust.Generate()
	if err != nil {
		f.Fatal(err)
	}
	a := &record.Agent{AgentName: "fuzz", Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"},
		Skills: []record.Skill{{SkillID: "s", Version: "1.0.0", SkillType: record.SkillTool, Capabilities: []record.Capability{{ID: "c"}}}}}
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), 1, fuzzNow, time.Hour)
	sa, err := id.Sign(a)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, port uint16) {
		l := newLAN(t)
		l.mdns.publish([]*hostedAgent{{rec: sa, hash: sa.Hash(), status: record.StatusHealthy, canSign: true}})
		s, err := newMemNet().host("10.0.0.1").ListenMulticast(mdnsAddr, "", 255)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		l.mdns.handle(s, b, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), port), 1, fuzzNow)
		l.mdns.tick(fuzzNow.Add(time.Second)) // run the timers
		l.mdns.mu.Lock()
		ni, nh := len(l.mdns.inst), len(l.mdns.hosts)
		l.mdns.mu.Unlock()
		if ni > maxInstances || nh > maxHosts {
			t.Fatal("cache bound exceeded")
		}
	})
}
