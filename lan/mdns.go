package lan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// DNS-SD on mDNS, written on github.com/miekg/dns: a responder for the
// hosted agents (one instance of _agentsc._tcp.local. each) and a browser
// that tracks the instances of that service on the LAN with their TTLs and
// goodbyes.
//
// Why not libp2p/zeroconf v2.2.0 (which agentd still uses, through
// go-libp2p, for libp2p's own mDNS peer discovery): its Server.SetText
// writes the service's TXT while its receive goroutines read it without a
// lock (a data race on every TXT update), it does not answer queries for
// its host name's A record, and its Browse reports each instance once:
// never a removal, a goodbye or a changed TXT. agentd needs all three.
const (
	// maxMDNSPacket is the largest mDNS message (RFC 6762 §17); the read
	// buffer is one byte more, so a longer datagram is seen as oversize.
	maxMDNSPacket = 9000
	// mdnsMTU bounds the messages agentd sends, so they are not
	// fragmented on an Ethernet link.
	mdnsMTU = 1400
	// maxInstances and maxHosts bound the browser's cache.
	maxInstances = 1024
	maxHosts     = 1024
	// maxQueryInterval caps the interval between two browse queries.
	maxQueryInterval = 30 * time.Second
	// mdnsTick is the resolution of the mDNS timers.
	mdnsTick = 250 * time.Millisecond
	// servicesName is the DNS-SD service type enumeration name (RFC 6763 §9).
	servicesName = "_services._dns-sd._udp.local."
	// cacheFlush is the cache-flush bit of the rrclass (RFC 6762 §10.2),
	// and the unicast-response bit of a question's qclass (§5.4).
	cacheFlush = 1 << 15
)

type mdnsProto struct {
	l       *LAN
	rl      *limiter
	service string // "_agentsc._tcp.local."
	ttl     uint32

	mu sync.Mutex
	// responder
	hostname  string                // "agentd-<8 hex>.local."
	pub       map[string]*published // by agent id
	announces []announceDue
	// browser
	inst      map[string]*instance // by lower-case instance name
	hosts     map[string]*hostEntry
	nextQuery time.Time
	queryStep time.Duration
	portWarn  bool
}

// published is one hosted agent's DNS-SD instance.
type published struct {
	agentID  string
	instance string // full instance name
	txt      []string
	hash     [32]byte
}

type announceDue struct {
	at  time.Time
	ids []string // agent ids; nil = all
}

// instance is a DNS-SD instance of the service seen on the LAN.
type instance struct {
	name      string
	expires   time.Time // the latest expiry of its PTR, SRV and TXT
	ttl       time.Duration
	refreshed time.Time // a record with TTL > 0 arrived
	target    string
	port      uint16
	txt       []string
	src       netip.Addr // source of the last response about it
	goodbyeAt time.Time
	askedAt   time.Time // last query for its SRV/TXT/A

	sum    *Summary // parsed txt
	sumErr error
	// announce is a seed-000 Announce carried in the TXT itself (the
	// strings concatenated), as an implementation of seed 000 alone
	// publishes its agent (§3.1: "Payload: JSON string"); unboundID is
	// the agent id of the record it held, once learnt.
	announce  []byte
	unboundID string
	handled   [32]byte // hash of the last summary acted on
	fetching  bool
	retryAt   time.Time
	failures  int // fetches failed in a row (retryBackoff)
}

type hostEntry struct {
	addrs map[netip.Addr]time.Time // expiry per address
}

func newMDNSProto(l *LAN) *mdnsProto {
	id := l.d.Identity.PeerID.String()
	if l.d.Host != nil {
		id = l.d.Host.ID().String()
	}
	sum := sha256.Sum256([]byte(id))
	return &mdnsProto{
		l:        l,
		rl:       newLimiter(l.cfg.RatePerSource, l.cfg.RateBurst),
		service:  strings.ToLower(l.cfg.ServiceType) + ".local.",
		ttl:      uint32(l.cfg.MDNS.TTL.D() / time.Second),
		hostname: "agentd-" + hex.EncodeToString(sum[:4]) + ".local.",
		pub:      map[string]*published{},
		inst:     map[string]*instance{},
		hosts:    map[string]*hostEntry{},
	}
}

// instanceLabel is the instance name of an agent: its agent_name followed
// by the first 8 hex digits of its agent id, so that two agents with the
// same name never claim the same DNS-SD name; the agent id alone when it
// has no name.
func instanceLabel(a *record.Agent) string {
	id := strings.ReplaceAll(a.AgentID, "-", "")
	if a.AgentName == "" || len(id) < 8 {
		return a.AgentID
	}
	name := a.AgentName
	if len(name) > 54 {
		name = name[:54]
	}
	return name + "-" + id[:8]
}

// ---- receiving ----

func (p *mdnsProto) serve(ctx context.Context, s Socket) error {
	buf := make([]byte, maxMDNSPacket+1)
	errs := 0
	for {
		n, src, ifIndex, err := s.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return err
			}
			p.l.count(mechMDNS, "read_error")
			if errs++; errs >= maxReadErrors {
				return err
			}
			continue
		}
		errs = 0
		p.handle(s, buf[:n], src, ifIndex, time.Now())
	}
}

// handle processes one mDNS packet: a query is answered for the hosted
// agents, a response feeds the browser.
func (p *mdnsProto) handle(s Socket, b []byte, src netip.AddrPort, ifIndex int, now time.Time) {
	l := p.l
	if len(b) > maxMDNSPacket {
		l.count(mechMDNS, "oversize")
		l.reject(mechMDNS, trust.ReasonTooLarge)
		return
	}
	if !p.rl.allow(src.Addr(), now) {
		l.count(mechMDNS, "rate_limited")
		return
	}
	var msg dns.Msg
	if err := msg.Unpack(b); err != nil {
		l.count(mechMDNS, "malformed")
		l.reject(mechMDNS, trust.ReasonMalformed)
		return
	}
	if msg.Opcode != dns.OpcodeQuery || msg.Rcode != dns.RcodeSuccess {
		l.count(mechMDNS, "ignored")
		return
	}
	if msg.Response {
		// RFC 6762 §6: responses not from port 5353 are ignored.
		if src.Port() != mdnsPort {
			l.count(mechMDNS, "ignored")
			return
		}
		p.browse(&msg, src.Addr(), now)
		return
	}
	p.answer(s, &msg, src, ifIndex)
}

// ---- responder ----

// answer responds to a query about the service, one of the hosted
// instances or the host name.
func (p *mdnsProto) answer(s Socket, q *dns.Msg, src netip.AddrPort, ifIndex int) {
	if len(q.Ns) > 0 {
		// A probe (RFC 6762 §8.1). The instance names carry the agent id,
		// so agentd does not defend them.
		return
	}
	pubs, hostname, port := p.snapshot()
	if len(pubs) == 0 || port == 0 {
		return
	}
	legacy := src.Port() != mdnsPort
	unicast := legacy
	var groups [][]dns.RR // answer groups: the first RR of each is the answer, the rest additional
	needAddr := false
	for _, qq := range q.Question {
		if c := qq.Qclass &^ cacheFlush; c != dns.ClassINET && c != dns.ClassANY {
			continue
		}
		if qq.Qclass&cacheFlush != 0 {
			unicast = true
		}
		name := strings.ToLower(qq.Name)
		t := qq.Qtype
		switch {
		case name == p.service && (t == dns.TypePTR || t == dns.TypeANY):
			for _, pb := range pubs {
				ptr := p.ptr(pb, p.ttl)
				if knownAnswer(q, ptr) {
					continue
				}
				groups = append(groups, []dns.RR{ptr, p.srv(pb, hostname, port, p.ttl, false), p.txtRR(pb, p.ttl, false)})
				needAddr = true
			}
		case name == servicesName && (t == dns.TypePTR || t == dns.TypeANY):
			groups = append(groups, []dns.RR{p.servicesPTR()})
		case name == hostname && (t == dns.TypeA || t == dns.TypeANY):
			for _, a := range p.addrRRs(s, ifIndex, hostname, p.ttlA(), true) {
				groups = append(groups, []dns.RR{a})
			}
		default:
			for _, pb := range pubs {
				if name != strings.ToLower(pb.instance) {
					continue
				}
				var g []dns.RR
				if t == dns.TypeSRV || t == dns.TypeANY {
					g = append(g, p.srv(pb, hostname, port, p.ttl, true))
					needAddr = true
				}
				if t == dns.TypeTXT || t == dns.TypeANY {
					g = append(g, p.txtRR(pb, p.ttl, true))
				}
				if len(g) > 0 {
					groups = append(groups, g)
				}
			}
		}
	}
	if len(groups) == 0 {
		return
	}
	var extra []dns.RR
	if needAddr {
		extra = p.addrRRs(s, ifIndex, hostname, p.ttlA(), true)
	}
	p.l.count(mechMDNS, "query_answered")
	for _, m := range p.pack(groups, extra) {
		if legacy {
			// RFC 6762 §6.7: a legacy unicast response repeats the
			// question and id, caps TTLs at 10 s and has no cache-flush
			// bits.
			m.Id = q.Id
			m.Question = q.Question
			for _, rr := range append(slices.Clone(m.Answer), m.Extra...) {
				h := rr.Header()
				h.Class &^= cacheFlush
				h.Ttl = min(h.Ttl, 10)
			}
		}
		b, err := m.Pack()
		if err != nil {
			p.l.log.Warn("cannot pack an mDNS response", "err", err)
			return
		}
		if unicast {
			err = s.WriteTo(b, src, ifIndex)
		} else {
			err = s.Multicast(b, ifIndex)
		}
		if err != nil {
			p.l.count(mechMDNS, "send_error")
		}
	}
}

// knownAnswer reports whether the query lists rr as a known answer with
// at least half its TTL left (RFC 6762 §7.1).
func knownAnswer(q *dns.Msg, rr *dns.PTR) bool {
	for _, k := range q.Answer {
		kp, ok := k.(*dns.PTR)
		if ok && strings.EqualFold(kp.Hdr.Name, rr.Hdr.Name) && strings.EqualFold(kp.Ptr, rr.Ptr) && kp.Hdr.Ttl >= rr.Hdr.Ttl/2 {
			return true
		}
	}
	return false
}

// pack puts answer groups into messages of at most mdnsMTU bytes: the
// first RR of a group is an answer, the others additional records; extra
// is added to every message.
func (p *mdnsProto) pack(groups [][]dns.RR, extra []dns.RR) []*dns.Msg {
	newMsg := func() *dns.Msg {
		m := new(dns.Msg)
		m.Response = true
		m.Authoritative = true
		m.Compress = true
		m.Extra = slices.Clone(extra)
		return m
	}
	var out []*dns.Msg
	cur := newMsg()
	for _, g := range groups {
		prevA, prevE := len(cur.Answer), len(cur.Extra)
		cur.Answer = append(cur.Answer, g[0])
		cur.Extra = append(cur.Extra, g[1:]...)
		if cur.Len() > mdnsMTU && prevA > 0 {
			cur.Answer, cur.Extra = cur.Answer[:prevA], cur.Extra[:prevE]
			out = append(out, cur)
			cur = newMsg()
			cur.Answer = append(cur.Answer, g[0])
			cur.Extra = append(cur.Extra, g[1:]...)
		}
	}
	if len(cur.Answer) > 0 {
		out = append(out, cur)
	}
	return out
}

func (p *mdnsProto) ptr(pb *published, ttl uint32) *dns.PTR {
	return &dns.PTR{Hdr: dns.RR_Header{Name: p.service, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: pb.instance}
}

func (p *mdnsProto) servicesPTR() *dns.PTR {
	return &dns.PTR{Hdr: dns.RR_Header{Name: servicesName, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: p.ttl}, Ptr: p.service}
}

func (p *mdnsProto) srv(pb *published, hostname string, port uint16, ttl uint32, flush bool) *dns.SRV {
	return &dns.SRV{Hdr: dns.RR_Header{Name: pb.instance, Rrtype: dns.TypeSRV, Class: class(flush), Ttl: ttl},
		Target: hostname, Port: port}
}

func (p *mdnsProto) txtRR(pb *published, ttl uint32, flush bool) *dns.TXT {
	return &dns.TXT{Hdr: dns.RR_Header{Name: pb.instance, Rrtype: dns.TypeTXT, Class: class(flush), Ttl: ttl}, Txt: pb.txt}
}

// ttlA is the TTL of the host's A records: RFC 6762 §10 recommends 120 s
// for host names; agentd uses the service TTL when that is longer.
func (p *mdnsProto) ttlA() uint32 { return max(p.ttl, 120) }

// addrRRs returns the A records of the host name for interface ifIndex (all
// joined interfaces when 0).
func (p *mdnsProto) addrRRs(s Socket, ifIndex int, hostname string, ttl uint32, flush bool) []dns.RR {
	var out []dns.RR
	for _, a := range s.LocalAddrs(ifIndex) {
		out = append(out, &dns.A{Hdr: dns.RR_Header{Name: hostname, Rrtype: dns.TypeA, Class: class(flush), Ttl: ttl},
			A: net.IP(a.AsSlice())})
	}
	return out
}

func class(flush bool) uint16 {
	if flush {
		return dns.ClassINET | cacheFlush
	}
	return dns.ClassINET
}

// snapshot returns the published instances sorted by name, the host name
// and the SRV port (0 when none is known yet).
func (p *mdnsProto) snapshot() ([]*published, string, uint16) {
	port := p.port()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*published, 0, len(p.pub))
	for _, pb := range p.pub {
		out = append(out, pb)
	}
	slices.SortFunc(out, func(a, b *published) int { return strings.Compare(a.instance, b.instance) })
	return out, p.hostname, port
}

// port is Config.Port, or the libp2p host's TCP port.
func (p *mdnsProto) port() uint16 {
	if p.l.cfg.Port != 0 {
		return uint16(p.l.cfg.Port)
	}
	if h := p.l.d.Host; h != nil {
		for _, a := range h.Addrs() {
			if v, err := a.ValueForProtocol(ma.P_TCP); err == nil {
				var port int
				if _, err := fmt.Sscanf(v, "%d", &port); err == nil && port > 0 && port < 65536 {
					return uint16(port)
				}
			}
		}
	}
	return 0
}

// publish updates the published instances from the hosted agents and
// returns the agent ids whose instance is new or whose TXT changed.
func (p *mdnsProto) publish(hs []*hostedAgent) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var changed []string
	for _, h := range hs {
		old, ok := p.pub[h.id()]
		if ok && old.hash == h.hash {
			continue
		}
		txt, err := SummaryOf(h.rec).TXT()
		if err != nil {
			p.l.log.Warn("cannot build the mDNS TXT summary", "agent_id", h.id(), "err", err)
			continue
		}
		inst := instanceLabel(&h.rec.Agent) + "." + p.service
		p.pub[h.id()] = &published{agentID: h.id(), instance: inst, txt: txt, hash: h.hash}
		changed = append(changed, h.id())
	}
	return changed
}

// announce publishes the changed hosted agents (every one when all) with
// unsolicited responses, repeated once a second later (RFC 6762 §8.3).
func (p *mdnsProto) announce(changed []*hostedAgent, all bool) {
	if all {
		changed = p.l.hosted.list()
	}
	ids := p.publish(changed)
	if all {
		ids = nil
		p.mu.Lock()
		for id := range p.pub {
			ids = append(ids, id)
		}
		p.mu.Unlock()
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	if p.send(ids, p.ttl) {
		p.mu.Lock()
		p.announces = append(p.announces, announceDue{at: time.Now().Add(time.Second), ids: ids})
		p.mu.Unlock()
	}
}

// goodbye withdraws the instances of the agents (TTL 0, RFC 6762 §10.1)
// and stops publishing them.
func (p *mdnsProto) goodbye(hs []*hostedAgent) {
	ids := make([]string, 0, len(hs))
	for _, h := range hs {
		ids = append(ids, h.id())
	}
	p.send(ids, 0)
	p.mu.Lock()
	for _, id := range ids {
		delete(p.pub, id)
	}
	p.mu.Unlock()
}

// hostGoodbye withdraws the host name's A records (Close).
func (p *mdnsProto) hostGoodbye() {
	s := p.l.sock(mechMDNS)
	if s == nil {
		return
	}
	p.mu.Lock()
	hostname := p.hostname
	p.mu.Unlock()
	for _, idx := range s.Interfaces() {
		m := &dns.Msg{}
		m.Response, m.Authoritative = true, true
		m.Answer = p.addrRRs(s, idx, hostname, 0, true)
		if len(m.Answer) == 0 {
			continue
		}
		if b, err := m.Pack(); err == nil {
			_ = s.Multicast(b, idx)
		}
	}
}

// send multicasts the records of the given published agents on every
// interface with that interface's addresses; ttl 0 is a goodbye.
func (p *mdnsProto) send(ids []string, ttl uint32) bool {
	s := p.l.sock(mechMDNS)
	if s == nil {
		p.l.count(mechMDNS, "send_unavailable")
		return false
	}
	pubs, hostname, port := p.snapshot()
	if port == 0 {
		p.mu.Lock()
		warn := !p.portWarn
		p.portWarn = true
		p.mu.Unlock()
		if warn {
			p.l.log.Warn("mDNS: no libp2p TCP port to advertise; the agents are not published until the host listens on TCP")
		}
		return false
	}
	var groups [][]dns.RR
	for _, pb := range pubs {
		if !slices.Contains(ids, pb.agentID) {
			continue
		}
		groups = append(groups, []dns.RR{p.ptr(pb, ttl), p.srv(pb, hostname, port, ttl, ttl > 0), p.txtRR(pb, ttl, ttl > 0)})
	}
	if len(groups) == 0 {
		return false
	}
	if ttl == 0 {
		// A goodbye puts every record in the answer section.
		var flat []dns.RR
		for _, g := range groups {
			flat = append(flat, g...)
		}
		groups = groups[:0]
		for _, rr := range flat {
			groups = append(groups, []dns.RR{rr})
		}
	}
	ok := false
	for _, idx := range s.Interfaces() {
		var extra []dns.RR
		if ttl > 0 {
			extra = p.addrRRs(s, idx, hostname, p.ttlA(), true)
		}
		for _, m := range p.pack(groups, extra) {
			if ttl > 0 {
				// Unsolicited announcements carry every record as an
				// answer (RFC 6762 §8.3).
				m.Answer = append(m.Answer, m.Extra...)
				m.Extra = nil
			}
			b, err := m.Pack()
			if err != nil {
				p.l.log.Warn("cannot pack an mDNS announcement", "err", err)
				continue
			}
			if err := s.Multicast(b, idx); err != nil {
				p.l.count(mechMDNS, "send_error")
				continue
			}
			ok = true
		}
	}
	if ok {
		if ttl == 0 {
			p.l.count(mechMDNS, "goodbye_sent")
		} else {
			p.l.count(mechMDNS, "announce_sent")
		}
	}
	return ok
}

// onUp starts browsing afresh when the socket (re)opens.
func (p *mdnsProto) onUp() {
	p.mu.Lock()
	p.nextQuery = time.Time{}
	p.queryStep = 0
	p.mu.Unlock()
}

// ---- browser ----

// browse applies a response to the cache of instances.
func (p *mdnsProto) browse(m *dns.Msg, src netip.Addr, now time.Time) {
	p.mu.Lock()
	touched := map[*instance]bool{}
	goodbyes := map[*instance]bool{}
	aRecs := map[string][]*dns.A{}
	rrs := append(slices.Clone(m.Answer), m.Extra...)
	for _, rr := range rrs {
		h := rr.Header()
		if c := h.Class &^ cacheFlush; c != dns.ClassINET {
			continue
		}
		name := strings.ToLower(h.Name)
		ttl := time.Duration(h.Ttl) * time.Second
		switch r := rr.(type) {
		case *dns.PTR:
			if name != p.service {
				continue
			}
			in := p.instanceLocked(strings.ToLower(r.Ptr), now, h.Ttl > 0)
			if in == nil {
				continue
			}
			if h.Ttl == 0 {
				goodbyes[in] = true
				continue
			}
			in.refresh(now, ttl)
			touched[in] = true
		case *dns.SRV:
			if !strings.HasSuffix(name, "."+p.service) {
				continue
			}
			in := p.instanceLocked(name, now, h.Ttl > 0)
			if in == nil {
				continue
			}
			if h.Ttl == 0 {
				goodbyes[in] = true
				continue
			}
			in.refresh(now, ttl)
			in.target, in.port, in.src = strings.ToLower(r.Target), r.Port, src
			touched[in] = true
		case *dns.TXT:
			if !strings.HasSuffix(name, "."+p.service) || h.Ttl == 0 {
				continue
			}
			in := p.instanceLocked(name, now, true)
			if in == nil {
				continue
			}
			in.refresh(now, ttl)
			if !slices.Equal(in.txt, r.Txt) {
				in.txt = slices.Clone(r.Txt)
				in.announce = nil
				s, err := ParseTXT(in.txt)
				if err != nil && isJSONPayload(in.txt) {
					in.sum, in.sumErr, in.announce = nil, nil, txtPayload(in.txt)
				} else if err != nil {
					in.sum, in.sumErr = nil, err
					p.l.count(mechMDNS, "txt_invalid")
					p.l.reject(mechMDNS, trust.ReasonMalformed)
				} else {
					in.sum, in.sumErr = &s, nil
				}
			}
			touched[in] = true
		case *dns.A:
			aRecs[name] = append(aRecs[name], r)
		}
	}
	// Keep the A records of the hosts the instances point at.
	for _, in := range p.inst {
		for _, a := range aRecs[in.target] {
			p.hostAddrLocked(in.target, a, now)
		}
	}
	var found []*instance
	for in := range goodbyes {
		if touched[in] {
			continue // the same packet re-announces it
		}
		if addrs := p.addrsLocked(in, now); len(addrs) > 0 && !slices.Contains(addrs, src) && src != in.src {
			// mDNS is unauthenticated: a goodbye counts only from the
			// instance's own host.
			p.l.count(mechMDNS, "goodbye_refused")
			continue
		}
		if in.goodbyeAt.IsZero() {
			in.goodbyeAt = now.Add(p.l.cfg.GoodbyeGrace)
			p.l.count(mechMDNS, "goodbye")
		}
	}
	var payloads []*instance
	for in := range touched {
		switch {
		case in.sum != nil && in.port != 0:
			found = append(found, in)
		case in.announce != nil:
			payloads = append(payloads, in)
		}
	}
	p.mu.Unlock()
	for _, in := range found {
		p.found(in, now)
	}
	for _, in := range payloads {
		p.foundAnnounce(in)
	}
}

// txtPayload joins the strings of a TXT record into the bytes they carry:
// miekg/dns holds them in presentation form, with '"' and '\\' escaped by
// a backslash and other bytes outside printable ASCII as \DDD (decimal).
func txtPayload(txt []string) []byte {
	var out []byte
	for _, t := range txt {
		for i := 0; i < len(t); i++ {
			c := t[i]
			if c != '\\' || i+1 >= len(t) {
				out = append(out, c)
				continue
			}
			if i+3 < len(t) && isDigit(t[i+1]) && isDigit(t[i+2]) && isDigit(t[i+3]) {
				if v := int(t[i+1]-'0')*100 + int(t[i+2]-'0')*10 + int(t[i+3]-'0'); v <= 255 {
					out = append(out, byte(v))
					i += 3
					continue
				}
			}
			out = append(out, t[i+1])
			i++
		}
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isJSONPayload reports whether a TXT record is a JSON object split over
// its strings rather than key=value pairs.
func isJSONPayload(txt []string) bool {
	if len(txt) == 0 {
		return false
	}
	n := 0
	for _, t := range txt {
		n += len(t)
	}
	return n <= maxTXTParse && strings.HasPrefix(strings.TrimLeft(txt[0], " \t\r\n"), "{")
}

// foundAnnounce acts on an instance whose TXT carries a seed-000
// Announce: an agent of an implementation of seed 000 alone, signed by
// its agent key without agentd's peer binding. The record is verified and
// learnt as unbound (Deps.LearnUnbound); each response that carries it
// again proves life as a re-announcement to a registry does. A record
// with a peer_id is not taken from a TXT: agentd peers publish a summary
// and serve the record over an authenticated fetch.
func (p *mdnsProto) foundAnnounce(in *instance) {
	l := p.l
	p.mu.Lock()
	raw := in.announce
	p.mu.Unlock()
	if l.d.LearnUnbound == nil {
		return
	}
	sa, _, err := record.ParseAnnounceUnbound(raw)
	if err == nil && !sa.Unbound() {
		err = fmt.Errorf("a record with peer_id %s in a TXT: agentd peers publish a summary", sa.Agent.PeerID)
	}
	if err != nil {
		l.count(mechMDNS, "txt_invalid")
		l.reject(mechMDNS, trust.ReasonOf(err))
		return
	}
	if l.hosted.has(sa.Agent.AgentID) {
		return
	}
	if err := l.d.LearnUnbound(sa); err != nil {
		l.count(mechMDNS, "unbound_refused")
		l.reject(mechMDNS, trust.ReasonOf(err))
		l.log.Debug("unbound mDNS announce refused", "agent_id", sa.Agent.AgentID, "err", err)
		return
	}
	p.mu.Lock()
	in.unboundID = sa.Agent.AgentID
	p.mu.Unlock()
	l.count(mechMDNS, "unbound_accepted")
}

func (in *instance) refresh(now time.Time, ttl time.Duration) {
	in.goodbyeAt = time.Time{}
	in.refreshed = now
	in.ttl = ttl
	if e := now.Add(ttl); e.After(in.expires) {
		in.expires = e
	}
}

// instanceLocked returns the cached instance, creating it when create is
// set (evicting the one that expires first when the cache is full).
func (p *mdnsProto) instanceLocked(name string, now time.Time, create bool) *instance {
	if !strings.HasSuffix(name, "."+p.service) || len(name) > 255 {
		return nil
	}
	if in, ok := p.inst[name]; ok {
		return in
	}
	if !create {
		return nil
	}
	if len(p.inst) >= maxInstances {
		var first *instance
		for _, in := range p.inst {
			if first == nil || in.expires.Before(first.expires) {
				first = in
			}
		}
		delete(p.inst, first.name)
	}
	in := &instance{name: name, expires: now}
	p.inst[name] = in
	return in
}

func (p *mdnsProto) hostAddrLocked(host string, a *dns.A, now time.Time) {
	ip, ok := netip.AddrFromSlice(a.A.To4())
	if !ok || a.A.To4() == nil {
		return
	}
	he, ok := p.hosts[host]
	if !ok {
		if len(p.hosts) >= maxHosts {
			return
		}
		he = &hostEntry{addrs: map[netip.Addr]time.Time{}}
		p.hosts[host] = he
	}
	if a.Hdr.Ttl == 0 {
		// A goodbye for the address: RFC 6762 §10.1's one second.
		if _, ok := he.addrs[ip]; ok {
			he.addrs[ip] = now.Add(time.Second)
		}
		return
	}
	if len(he.addrs) < maxAddrs || he.addrs[ip] != (time.Time{}) {
		he.addrs[ip] = now.Add(time.Duration(a.Hdr.Ttl) * time.Second)
	}
}

// addrsLocked returns the addresses of an instance's host: its A records,
// or the source of the response that carried its SRV when none is known.
func (p *mdnsProto) addrsLocked(in *instance, now time.Time) []netip.Addr {
	var out []netip.Addr
	if he, ok := p.hosts[in.target]; ok {
		for ip, exp := range he.addrs {
			if exp.After(now) {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	if len(out) == 0 && in.src.IsValid() {
		out = append(out, in.src)
	}
	return out
}

// found acts on a complete instance: its peer is remembered, and its
// record is obtained unless the LAN already holds the one the summary
// points at (then the agent is learnt again, as proof of life).
func (p *mdnsProto) found(in *instance, now time.Time) {
	l := p.l
	p.mu.Lock()
	sum := *in.sum
	addrs := p.addrsLocked(in, now)
	port := in.port
	name := in.name
	src := in.src
	p.mu.Unlock()
	if l.hosted.has(sum.AgentID) || len(addrs) == 0 {
		return
	}
	pid, err := peer.Decode(sum.PeerID)
	if err != nil {
		return
	}
	if h := l.d.Host; h != nil && pid == h.ID() {
		return
	}
	var mas []ma.Multiaddr
	for _, ip := range addrs {
		if a, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/%s/tcp/%d", ip, port)); err == nil {
			mas = append(mas, a)
		}
	}
	l.peers.add(pid, mas, now)
	// mDNS answers are unsigned (RFC 6762) and the summary of a held record
	// is public: anyone on the link can replay it, from any address, to
	// keep a dead agent alive. A refresh proves life only from an address
	// the agent was verified at; from another one the record is fetched
	// from the peer itself (a challenge-bound, authenticated fetch), and
	// only that answer counts.
	h, known := l.agents.hash(sum.AgentID)
	held := known && h == sum.Hash
	direct := held && !l.provenAt(sum.AgentID, src)
	if direct {
		l.count(mechMDNS, "refresh_unproven")
	} else if held {
		l.agents.mu.Lock()
		e := l.agents.entryLocked(sum.AgentID, now)
		e.lastSeen = now
		e.seenAt(addrs[0])
		revived := e.gone
		e.gone = false
		var learn *record.SignedAgent
		if revived || now.Sub(e.lastLearn) >= p.l.cfg.MDNS.TTL.D()/2 {
			e.lastLearn = now
			learn = e.rec
		}
		l.agents.mu.Unlock()
		p.mu.Lock()
		in.handled = sum.Hash
		p.mu.Unlock()
		l.count(mechMDNS, "refreshed")
		if learn != nil {
			l.learn(learn)
		}
		return
	}
	p.mu.Lock()
	if in.fetching || (in.handled == sum.Hash && now.Before(in.retryAt)) || now.Before(in.retryAt) {
		p.mu.Unlock()
		return
	}
	in.fetching = true
	p.mu.Unlock()
	ai := peer.AddrInfo{ID: pid, Addrs: mas}
	ok := l.enqueue(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		sa, err := p.obtain(ctx, sum, ai, direct)
		p.mu.Lock()
		in.fetching = false
		in.handled = sum.Hash
		if err != nil {
			in.retryAt = time.Now().Add(l.retryBackoff(in.failures))
			in.failures++
		} else {
			in.failures = 0
		}
		p.mu.Unlock()
		if err != nil {
			l.count(mechMDNS, "fetch_failed")
			l.log.Debug("no verified record for an mDNS instance", "instance", name, "agent_id", sum.AgentID, "err", err)
			return
		}
		at := addrs[0]
		if slices.Contains(addrs, src) {
			at = src // the address later refreshes come from
		}
		l.remember(sa, at)
		l.count(mechMDNS, "fetched")
		l.learn(sa)
	})
	if !ok {
		p.mu.Lock()
		in.fetching = false
		in.retryAt = now.Add(time.Second)
		p.mu.Unlock()
	}
}

// obtain returns the verified record a summary points at: from the node
// when it holds it (unless direct), else fetched from the summary's peer.
// The record must hash to h, or be newer than seq (the summary lags a
// re-signing).
func (p *mdnsProto) obtain(ctx context.Context, sum Summary, ai peer.AddrInfo, direct bool) (*record.SignedAgent, error) {
	l := p.l
	want := func(sa *record.SignedAgent) bool {
		return sa.Agent.PeerID == sum.PeerID && (sa.Hash() == sum.Hash || sa.Agent.Seq > sum.Seq)
	}
	var errs []error
	if l.d.Resolve != nil && !direct {
		if sa, err := l.d.Resolve(ctx, sum.AgentID); err == nil && sa != nil && sa.Agent.AgentID == sum.AgentID && want(sa) {
			if err := l.verify(sa, ""); err == nil {
				return sa, nil
			}
		}
	}
	if l.d.Fetch == nil {
		return nil, fmt.Errorf("%w %s: fetching is off", ErrUnresolved, sum.AgentID)
	}
	recs, err := l.d.Fetch(ctx, ai, sum.AgentID)
	if err != nil {
		errs = append(errs, err)
	}
	for _, sa := range recs {
		if sa == nil || sa.Agent.AgentID != sum.AgentID {
			continue
		}
		if !want(sa) {
			errs = append(errs, fmt.Errorf("record seq %d does not match the summary (hash or newer than seq %d)", sa.Agent.Seq, sum.Seq))
			l.reject(mechMDNS, trust.ReasonMalformed)
			continue
		}
		if err := l.verify(sa, ai.ID); err != nil {
			l.reject(mechMDNS, trust.ReasonOf(err))
			errs = append(errs, err)
			continue
		}
		return sa, nil
	}
	return nil, fmt.Errorf("%w %s: %w", ErrUnresolved, sum.AgentID, errors.Join(errs...))
}

// queryLoop runs the mDNS timers: browse queries (at once, then at 1, 2,
// 4 ... s up to maxQueryInterval, and whenever a cached instance reaches
// 80% of its TTL without a refresh, RFC 6762 §5.2), the repeated
// announcements, goodbyes whose grace ended, and expiry.
func (p *mdnsProto) queryLoop(ctx context.Context) {
	t := time.NewTicker(mdnsTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.tick(now)
		}
	}
}

func (p *mdnsProto) tick(now time.Time) {
	l := p.l
	s := l.sock(mechMDNS)
	p.mu.Lock()
	// Announcement repeats.
	var repeat [][]string
	keep := p.announces[:0]
	for _, a := range p.announces {
		if now.Before(a.at) {
			keep = append(keep, a)
			continue
		}
		repeat = append(repeat, a.ids)
	}
	p.announces = keep
	// Goodbyes and expiry.
	var gone []string
	for name, in := range p.inst {
		switch {
		case !in.goodbyeAt.IsZero() && !now.Before(in.goodbyeAt):
			delete(p.inst, name)
			if in.sum != nil {
				gone = append(gone, in.sum.AgentID)
			} else if in.unboundID != "" {
				gone = append(gone, in.unboundID)
			}
		case now.After(in.expires) && in.goodbyeAt.IsZero():
			delete(p.inst, name)
			l.count(mechMDNS, "expired")
		}
	}
	for host, he := range p.hosts {
		for ip, exp := range he.addrs {
			if now.After(exp) {
				delete(he.addrs, ip)
			}
		}
		if len(he.addrs) == 0 {
			delete(p.hosts, host)
		}
	}
	// Queries.
	var q *dns.Msg
	if s != nil {
		q = p.queryLocked(now)
	}
	p.mu.Unlock()

	for _, ids := range repeat {
		p.send(ids, p.ttl)
	}
	for _, id := range gone {
		if l.hosted.has(id) {
			continue
		}
		l.agents.mu.Lock()
		e, ok := l.agents.m[id]
		wasGone := ok && e.gone
		if ok {
			e.gone = true
		}
		l.agents.mu.Unlock()
		if !wasGone {
			l.log.Debug("agent left the LAN (mDNS goodbye)", "agent_id", id)
			l.forget(id)
		}
	}
	if q != nil {
		if b, err := q.Pack(); err == nil {
			if err := s.Multicast(b, 0); err == nil {
				l.count(mechMDNS, "query_sent")
			}
		}
	}
}

// queryLocked returns the browse query due now, or nil.
func (p *mdnsProto) queryLocked(now time.Time) *dns.Msg {
	due := !now.Before(p.nextQuery)
	q := new(dns.Msg)
	q.Compress = true
	var stale []*instance
	for _, in := range p.inst {
		if !in.goodbyeAt.IsZero() || in.ttl == 0 {
			continue
		}
		// 80% of the TTL, plus up to 2% random variation.
		at := in.refreshed.Add(in.ttl*8/10 + time.Duration(rand.Int64N(int64(in.ttl/50)+1)))
		if !now.Before(at) && now.Sub(in.askedAt) >= time.Second {
			stale = append(stale, in)
		}
	}
	if !due && len(stale) == 0 {
		return nil
	}
	q.Question = append(q.Question, dns.Question{Name: p.service, Qtype: dns.TypePTR, Qclass: dns.ClassINET})
	// Known answers: instances with more than half their TTL left.
	for _, in := range p.inst {
		if in.ttl == 0 || !in.goodbyeAt.IsZero() || slices.Contains(stale, in) {
			continue
		}
		left := in.expires.Sub(now)
		if left > in.ttl/2 {
			q.Answer = append(q.Answer, &dns.PTR{Hdr: dns.RR_Header{Name: p.service, Rrtype: dns.TypePTR,
				Class: dns.ClassINET, Ttl: uint32(left / time.Second)}, Ptr: in.name})
		}
	}
	for _, in := range stale {
		in.askedAt = now
		q.Question = append(q.Question,
			dns.Question{Name: in.name, Qtype: dns.TypeSRV, Qclass: dns.ClassINET},
			dns.Question{Name: in.name, Qtype: dns.TypeTXT, Qclass: dns.ClassINET})
	}
	// Instances missing their SRV, TXT or address.
	for _, in := range p.inst {
		if in.goodbyeAt.IsZero() && now.Sub(in.askedAt) >= time.Second && (in.port == 0 || in.txt == nil) {
			in.askedAt = now
			q.Question = append(q.Question,
				dns.Question{Name: in.name, Qtype: dns.TypeSRV, Qclass: dns.ClassINET},
				dns.Question{Name: in.name, Qtype: dns.TypeTXT, Qclass: dns.ClassINET})
		}
		if in.target != "" && len(p.addrsLocked(in, now)) == 0 && now.Sub(in.askedAt) >= time.Second {
			in.askedAt = now
			q.Question = append(q.Question, dns.Question{Name: in.target, Qtype: dns.TypeA, Qclass: dns.ClassINET})
		}
	}
	if q.Len() > mdnsMTU {
		q.Answer = nil // known answers are an optimisation
	}
	if due {
		if p.queryStep == 0 {
			p.queryStep = time.Second
		} else {
			p.queryStep = min(2*p.queryStep, maxQueryInterval)
		}
		p.nextQuery = now.Add(p.queryStep)
	}
	return q
}
