package lan

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"github.com/miekg/dns"
)

var mdnsAddr = netip.MustParseAddrPort("224.0.0.251:5353")

// mdnsPeer is a socket on the memNet's mDNS port, as Avahi or a browser.
func mdnsPeer(t *testing.T, n *memNet, ip string) *memSock {
	t.Helper()
	s, err := n.host(ip).ListenMulticast(mdnsAddr, "", 255)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.(*memSock)
}

func (s *memSock) sendMsg(t *testing.T, m *dns.Msg) {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Multicast(b, 0); err != nil {
		t.Fatal(err)
	}
}

// nextResponse returns the next mDNS response the socket receives from
// src (any source when src is invalid), or nil when none arrives before
// the bubble idles.
func (s *memSock) nextResponse(t *testing.T, src netip.Addr) *dns.Msg {
	t.Helper()
	for {
		synctestWait()
		select {
		case d := <-s.ch:
			var m dns.Msg
			if err := m.Unpack(d.b); err != nil {
				t.Fatalf("unpack: %v", err)
			}
			if m.Response && (!src.IsValid() || d.src.Addr() == src) {
				return &m
			}
		default:
			return nil
		}
	}
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	return m
}

func rrsOf[T dns.RR](rrs []dns.RR) []T {
	var out []T
	for _, rr := range rrs {
		if x, ok := rr.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// The responder answers a browse query with the instance's PTR, and its
// SRV, TXT summary and A record as additional records.
func TestMDNSResponderAnswersBrowse(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		b := newNode(t, n, "10.0.0.2", mdnsOnly)
		rb := b.host("beta", 3, skill("skill-b", record.SkillTool, nil, "cap-b"))
		b.start()
		q := mdnsPeer(t, n, "10.0.0.9")
		synctestWait()
		for q.nextResponse(t, netip.Addr{}) != nil { // the start-up announcements
		}
		q.sendMsg(t, query("_agentsc._tcp.local.", dns.TypePTR))
		r := q.nextResponse(t, b.h.ip)
		if r == nil {
			t.Fatal("no answer")
		}
		inst := instanceLabel(&rb.Agent) + "._agentsc._tcp.local."
		ptrs := rrsOf[*dns.PTR](r.Answer)
		if len(ptrs) != 1 || ptrs[0].Ptr != inst || ptrs[0].Hdr.Ttl != 10 {
			t.Fatalf("answer = %v", r.Answer)
		}
		if !strings.HasPrefix(inst, "beta-") || len(strings.Split(inst, ".")[0]) != len("beta-")+8 {
			t.Fatalf("instance name %q", inst)
		}
		srvs := rrsOf[*dns.SRV](r.Extra)
		txts := rrsOf[*dns.TXT](r.Extra)
		as := rrsOf[*dns.A](r.Extra)
		if len(srvs) != 1 || srvs[0].Port != 4777 || !strings.HasPrefix(srvs[0].Target, "agentd-") {
			t.Fatalf("srv = %v", srvs)
		}
		if len(as) != 1 || !as[0].A.Equal(net.ParseIP("10.0.0.2")) || as[0].Hdr.Name != srvs[0].Target {
			t.Fatalf("a = %v", as)
		}
		if len(txts) != 1 {
			t.Fatalf("txt = %v", txts)
		}
		sum, err := ParseTXT(txts[0].Txt)
		if err != nil {
			t.Fatal(err)
		}
		if want := SummaryOf(rb); sum.Hash != want.Hash || sum.Seq != 3 || sum.AgentID != want.AgentID || sum.PeerID != want.PeerID {
			t.Fatalf("summary = %+v", sum)
		}
		if TXTSize(txts[0].Txt) > MaxTXTBytes {
			t.Fatalf("TXT is %d bytes", TXTSize(txts[0].Txt))
		}

		// Known-answer suppression: a querier that knows the PTR gets no
		// answer.
		kq := query("_agentsc._tcp.local.", dns.TypePTR)
		kq.Answer = []dns.RR{&dns.PTR{Hdr: dns.RR_Header{Name: "_agentsc._tcp.local.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 9}, Ptr: inst}}
		q.sendMsg(t, kq)
		if r := q.nextResponse(t, b.h.ip); r != nil {
			t.Fatalf("answered a known answer: %v", r)
		}

		// The instance's SRV and TXT, the host's A record, and the service
		// type enumeration.
		q.sendMsg(t, query(inst, dns.TypeSRV))
		if r := q.nextResponse(t, b.h.ip); r == nil || len(rrsOf[*dns.SRV](r.Answer)) != 1 || r.Answer[0].Header().Class&cacheFlush == 0 {
			t.Fatalf("SRV answer = %v", r)
		}
		q.sendMsg(t, query(strings.ToUpper(srvs[0].Target), dns.TypeA))
		if r := q.nextResponse(t, b.h.ip); r == nil || len(rrsOf[*dns.A](r.Answer)) != 1 {
			t.Fatalf("A answer = %v", r)
		}
		q.sendMsg(t, query(servicesName, dns.TypePTR))
		if r := q.nextResponse(t, b.h.ip); r == nil || rrsOf[*dns.PTR](r.Answer)[0].Ptr != "_agentsc._tcp.local." {
			t.Fatalf("services answer = %v", r)
		}
		// Questions about others are not answered.
		q.sendMsg(t, query("_http._tcp.local.", dns.TypePTR))
		if r := q.nextResponse(t, b.h.ip); r != nil {
			t.Fatalf("answered for another service: %v", r)
		}
	})
}

// A legacy unicast query (source port not 5353) gets a unicast answer
// with its id and question, TTLs at most 10 s and no cache-flush bits.
func TestMDNSLegacyUnicast(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		b := newNode(t, n, "10.0.0.2", func(c *Config) {
			c.UDP.Enabled = false
			c.MDNS.TTL = 120_000_000_000 // 120 s
		})
		b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		b.start()
		s, err := n.host("10.0.0.9").ListenMulticast(netip.MustParseAddrPort("224.0.0.251:40000"), "", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		ls := s.(*memSock)
		q := query("_agentsc._tcp.local.", dns.TypePTR)
		q.Id = 4242
		bq, _ := q.Pack()
		synctestWait()
		n.send(5353, bq, netip.MustParseAddrPort("10.0.0.9:40000"), func(*memSock) bool { return true })
		r := ls.nextResponse(t, b.h.ip)
		if r == nil {
			t.Fatal("no unicast answer")
		}
		if r.Id != 4242 || len(r.Question) != 1 {
			t.Fatalf("legacy answer id %d questions %v", r.Id, r.Question)
		}
		for _, rr := range append(r.Answer, r.Extra...) {
			if h := rr.Header(); h.Ttl > 10 || h.Class&cacheFlush != 0 {
				t.Fatalf("legacy answer record %v", rr)
			}
		}
	})
}

// A changed record is re-announced at once with its new TXT summary
// (cache-flush bit set), twice.
func TestMDNSReannounceOnChange(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		b := newNode(t, n, "10.0.0.2", mdnsOnly)
		b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		q := mdnsPeer(t, n, "10.0.0.9")
		b.start()
		time.Sleep(3 * time.Second)
		for q.nextResponse(t, b.h.ip) != nil {
		}
		rb2 := b.host("beta", 2, skill("skill-b", record.SkillTool, nil, "cap-b", "cap-c"))
		b.lan.Refresh()
		seen := 0
		for range 2 {
			r := q.nextResponse(t, b.h.ip)
			if r == nil {
				time.Sleep(time.Second)
				r = q.nextResponse(t, b.h.ip)
			}
			if r == nil {
				break
			}
			txts := rrsOf[*dns.TXT](r.Answer)
			if len(txts) != 1 || txts[0].Hdr.Class&cacheFlush == 0 {
				t.Fatalf("announcement %v", r)
			}
			sum, err := ParseTXT(txts[0].Txt)
			if err != nil || sum.Hash != rb2.Hash() || strings.Join(sum.Capabilities, ",") != "cap-b,cap-c" {
				t.Fatalf("announced summary %+v %v", sum, err)
			}
			seen++
		}
		if seen != 2 {
			t.Fatalf("%d announcements of the change, want 2", seen)
		}
	})
}

// publication builds what Avahi sends for `avahi-publish -s NAME
// _agentsc._tcp PORT txt...` on a host with address ip.
func publication(name, host string, ip string, port uint16, txt []string, ttl uint32) *dns.Msg {
	inst := name + "._agentsc._tcp.local."
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	m.Answer = []dns.RR{
		&dns.PTR{Hdr: dns.RR_Header{Name: "_agentsc._tcp.local.", Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: inst},
		&dns.SRV{Hdr: dns.RR_Header{Name: inst, Rrtype: dns.TypeSRV, Class: dns.ClassINET | cacheFlush, Ttl: ttl}, Target: host, Port: port},
		&dns.TXT{Hdr: dns.RR_Header{Name: inst, Rrtype: dns.TypeTXT, Class: dns.ClassINET | cacheFlush, Ttl: ttl}, Txt: txt},
		&dns.A{Hdr: dns.RR_Header{Name: host, Rrtype: dns.TypeA, Class: dns.ClassINET | cacheFlush, Ttl: ttl}, A: net.ParseIP(ip)},
	}
	return m
}

// A service published by another responder (as avahi-publish does) whose
// TXT summary points at a record served by an agentd peer is discovered:
// the record is fetched from that peer and checked against the hash. A
// goodbye from another host is refused; one from the instance's host
// removes it after the grace.
func TestMDNSBrowseForeignPublication(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		// b serves its record over the record protocol but advertises
		// nothing itself.
		b := newNode(t, n, "10.0.0.2", func(c *Config) { c.UDP.Enabled, c.MDNS.Enabled = false, false })
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		a.start()
		synctestWait()
		avahi := mdnsPeer(t, n, "10.0.0.2")
		txt, err := SummaryOf(rb).TXT()
		if err != nil {
			t.Fatal(err)
		}
		// A summary whose hash matches nothing: not learnt.
		bad := SummaryOf(rb)
		bad.Hash[0] ^= 1
		badTXT, _ := bad.TXT()
		avahi.sendMsg(t, publication("wrong", "avahi-host.local.", "10.0.0.2", 4777, badTXT, 4500))
		eventually(t, time.Second, "fetch failed", func() bool { return a.counter(mechMDNS, "fetch_failed") == 1 })
		if a.learnedRec(rb.Agent.AgentID) != nil {
			t.Fatal("learnt a record that does not match the summary's hash")
		}

		avahi.sendMsg(t, publication("Beta Service", "avahi-host.local.", "10.0.0.2", 4777, txt, 4500))
		eventually(t, time.Second, "learnt", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })

		// Goodbye from elsewhere: refused.
		gb := publication("Beta Service", "avahi-host.local.", "10.0.0.2", 4777, txt, 0)
		gb.Answer = gb.Answer[:1]
		mdnsPeer(t, n, "10.0.0.66").sendMsg(t, gb)
		synctestWait()
		if a.counter(mechMDNS, "goodbye_refused") != 1 {
			t.Fatal("a goodbye from another host was not refused")
		}
		avahi.sendMsg(t, gb)
		eventually(t, 2*time.Second, "forgotten", func() bool { return a.forgotten(rb.Agent.AgentID) == 1 })
	})
}

// A goodbye followed within the grace by a re-announcement keeps the
// instance (RFC 6762 §10.1).
func TestMDNSGoodbyeCancelledByReannouncement(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		b := newNode(t, n, "10.0.0.2", func(c *Config) { c.UDP.Enabled, c.MDNS.Enabled = false, false })
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		a.start()
		synctestWait()
		avahi := mdnsPeer(t, n, "10.0.0.2")
		txt, _ := SummaryOf(rb).TXT()
		avahi.sendMsg(t, publication("beta", "h.local.", "10.0.0.2", 4777, txt, 120))
		eventually(t, time.Second, "learnt", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		gb := publication("beta", "h.local.", "10.0.0.2", 4777, txt, 0)
		avahi.sendMsg(t, gb)
		time.Sleep(500 * time.Millisecond)
		avahi.sendMsg(t, publication("beta", "h.local.", "10.0.0.2", 4777, txt, 120))
		time.Sleep(2 * time.Second)
		synctestWait()
		if a.forgotten(rb.Agent.AgentID) != 0 {
			t.Fatal("forgotten although re-announced within the grace")
		}
	})
}

// Cached instances are refreshed by queries at 80% of their TTL while the
// responder lives, and expire silently (no Forget) when it vanishes
// without a goodbye.
func TestMDNSRefreshAndExpiry(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		b := newNode(t, n, "10.0.0.2", mdnsOnly)
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		startInOrder(a, b)
		eventually(t, 3*time.Second, "learnt", func() bool { return a.learnedRec(rb.Agent.AgentID) != nil })
		time.Sleep(60 * time.Second)
		synctestWait()
		a.lan.mdns.mu.Lock()
		cached := len(a.lan.mdns.inst)
		a.lan.mdns.mu.Unlock()
		if cached != 1 {
			t.Fatalf("%d cached instances after 60 s with a live responder (TTL 10 s)", cached)
		}
		// b vanishes without a goodbye.
		n.setDrop(func(_ []byte, src netip.AddrPort) bool { return src.Addr() == b.h.ip })
		time.Sleep(15 * time.Second)
		synctestWait()
		a.lan.mdns.mu.Lock()
		cached = len(a.lan.mdns.inst)
		a.lan.mdns.mu.Unlock()
		if cached != 0 {
			t.Fatal("the instance did not expire")
		}
		if a.forgotten(rb.Agent.AgentID) != 0 {
			t.Fatal("an expiry is not a goodbye")
		}
		if a.counter(mechMDNS, "expired") != 1 {
			t.Fatal("expiry not counted")
		}
	})
}

// Malformed, oversize and non-5353 responses are dropped and counted.
func TestMDNSHostileInput(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		a.start()
		synctestWait()
		s := a.lan.sock(mechMDNS)
		src := netip.MustParseAddrPort("10.0.0.9:5353")
		a.lan.mdns.handle(s, []byte{1, 2, 3}, src, 1, time.Now())
		a.lan.mdns.handle(s, make([]byte, maxMDNSPacket+1), src, 1, time.Now())
		txt := []string{"txtvers=1", "id=not-a-uuid"}
		b, _ := publication("x", "h.local.", "10.0.0.9", 1, txt, 10).Pack()
		a.lan.mdns.handle(s, b, netip.MustParseAddrPort("10.0.0.9:40000"), 1, time.Now())
		a.lan.mdns.handle(s, b, src, 1, time.Now())
		for _, c := range []struct {
			outcome string
			want    float64
		}{{"malformed", 1}, {"oversize", 1}, {"ignored", 1}, {"txt_invalid", 1}} {
			if got := a.counter(mechMDNS, c.outcome); got != c.want {
				t.Errorf("%s = %v, want %v", c.outcome, got, c.want)
			}
		}
	})
}

// mDNS answers are unsigned: a host elsewhere on the link that replays the
// public summary of a held record (naming the agent's own address in its A
// record) must not keep a dead agent alive. From an address the agent was
// not verified at, the refresh is counted as unproven and the record is
// fetched from the peer itself; a dead peer answers nothing (issue 12
// item 7).
func TestSpoofedMDNSRefreshDoesNotProveLife(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		b := newNode(t, n, "10.0.0.2", func(c *Config) { c.UDP.Enabled, c.MDNS.Enabled = false, false })
		rb := b.host("beta", 1, skill("skill-b", record.SkillTool, nil, "cap-b"))
		id := rb.Agent.AgentID
		a.start()
		synctestWait()
		txt, err := SummaryOf(rb).TXT()
		if err != nil {
			t.Fatal(err)
		}
		pub := publication("Beta Service", "beta-host.local.", "10.0.0.2", 4777, txt, 4500)
		mdnsPeer(t, n, "10.0.0.2").sendMsg(t, pub)
		eventually(t, time.Second, "learnt", func() bool { return a.learnedRec(id) != nil })

		// The agent's node dies; a forgets having learnt it.
		b.mu.Lock()
		saved := b.locals
		b.locals = nil
		b.mu.Unlock()
		a.mu.Lock()
		delete(a.learned, id)
		a.mu.Unlock()
		time.Sleep(testConfig().MDNS.TTL.D())

		mdnsPeer(t, n, "10.0.0.66").sendMsg(t, pub)
		time.Sleep(2 * time.Second)
		if a.learnedRec(id) != nil {
			t.Fatal("a replayed mDNS answer from another host proved the dead agent alive")
		}
		if a.counter(mechMDNS, "refresh_unproven") != 1 || a.counter(mechMDNS, "fetch_failed") < 1 {
			t.Fatalf("refresh_unproven = %v, fetch_failed = %v; want 1 and >= 1",
				a.counter(mechMDNS, "refresh_unproven"), a.counter(mechMDNS, "fetch_failed"))
		}

		// From the agent's own address, with the agent alive, it still works.
		b.mu.Lock()
		b.locals = saved
		b.mu.Unlock()
		mdnsPeer(t, n, "10.0.0.2").sendMsg(t, pub)
		eventually(t, 2*time.Second, "refreshed from its own address", func() bool { return a.learnedRec(id) != nil })
	})
}

// seed000TXT is the mDNS TXT of an agent written from seed 000 alone
// (§3.1: the payload is the Announce's JSON): the Announce split into
// strings of at most 255 bytes, signed by the agent key, without peer_id,
// peer_signature, seq, issued_at or ttl_seconds.
func seed000TXT(t *testing.T, agentID, capability string, key *trust.Identity) []string {
	t.Helper()
	ag := testutil.NewSeed000Agent(t, agentID, capability)
	ag.SetKey(t, key.AgentKey)
	msg := ag.Announce(t, false)
	// miekg/dns holds TXT strings in presentation form: \ and " escaped.
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	var txt []string
	for len(msg) > 0 {
		n := min(len(msg), 255)
		txt = append(txt, esc.Replace(string(msg[:n])))
		msg = msg[n:]
	}
	if len(txt) < 2 {
		t.Fatalf("the test wants a payload over several strings, got %d", len(txt))
	}
	return txt
}

// An agent of another implementation of seed 000 publishes its signed
// Announce as the TXT of its _agentsc._tcp instance: learnt as a record
// without peer binding, verified by its agent signature; re-announcements
// refresh it, a tampered payload is refused, a goodbye forgets it.
func TestMDNSSeed000Payload(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := newMemNet()
		a := newNode(t, n, "10.0.0.1", mdnsOnly)
		a.start()
		synctestWait()
		key, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.NewString()
		txt := seed000TXT(t, id, "metrics", key)
		other := mdnsPeer(t, n, "10.0.0.7")
		other.sendMsg(t, publication("py-agent", "py.local.", "10.0.0.7", 9000, txt, 120))
		eventually(t, time.Second, "learnt", func() bool { return a.learnedRec(id) != nil })
		sa := a.learnedRec(id)
		if !sa.Unbound() || sa.Agent.Capabilities["metrics"] != "2.0" || a.counter(mechMDNS, "unbound_accepted") != 1 {
			t.Fatalf("%+v", sa.Agent)
		}
		other.sendMsg(t, publication("py-agent", "py.local.", "10.0.0.7", 9000, txt, 120))
		eventually(t, time.Second, "refreshed", func() bool { return a.counter(mechMDNS, "unbound_accepted") == 2 })

		// A payload whose object was changed after signing.
		forged := slices.Clone(txt)
		forged[0] = strings.Replace(forged[0], "metrics", "metricz", 1)
		other.sendMsg(t, publication("forged", "py.local.", "10.0.0.7", 9000, forged, 120))
		eventually(t, time.Second, "refused", func() bool { return a.counter(mechMDNS, "unbound_refused") == 1 })

		gb := publication("py-agent", "py.local.", "10.0.0.7", 9000, txt, 0)
		gb.Answer = gb.Answer[:1]
		other.sendMsg(t, gb)
		eventually(t, 2*time.Second, "forgotten", func() bool { return a.forgotten(id) == 1 })
	})
}
