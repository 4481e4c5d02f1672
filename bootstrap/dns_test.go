package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"
)

// zone is a DNS server for tests: TXT and A records by name, served over
// UDP on loopback (github.com/miekg/dns, already in the module graph
// through go-libp2p). Names are fully qualified ("boot.test.").
type zone struct {
	mu      sync.Mutex
	txt     map[string][]string
	a       map[string][]net.IP
	addr    string
	queries int
}

func newZone(t testing.TB) *zone {
	t.Helper()
	z := &zone{txt: map[string][]string{}, a: map[string][]net.IP{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.addr = pc.LocalAddr().String()
	testutil.ServeDNS(t, pc, z)
	return z
}

func (z *zone) setTXT(name string, values ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.txt[name] = values
}

func (z *zone) setA(name string, ips ...net.IP) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.a[name] = ips
}

func (z *zone) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	z.mu.Lock()
	z.queries++
	for _, qu := range q.Question {
		txt, okT := z.txt[qu.Name]
		ips, okA := z.a[qu.Name]
		if !okT && !okA {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: qu.Name, Class: dns.ClassINET, Ttl: 60}
		switch qu.Qtype {
		case dns.TypeTXT:
			for _, v := range txt {
				h := hdr
				h.Rrtype = dns.TypeTXT
				m.Answer = append(m.Answer, &dns.TXT{Hdr: h, Txt: []string{v}})
			}
		case dns.TypeA:
			for _, ip := range ips {
				h := hdr
				h.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: h, A: ip})
			}
		}
	}
	z.mu.Unlock()
	_ = w.WriteMsg(m)
}

// resolver asks only this zone's server.
func (z *zone) resolver(t testing.TB) *madns.Resolver {
	t.Helper()
	nr := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", z.addr)
	}}
	r, err := madns.NewResolver(madns.WithDefaultResolver(nr))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func addrsOf(ps []peer.AddrInfo, id peer.ID) []string {
	for _, p := range ps {
		if p.ID == id {
			var out []string
			for _, a := range p.Addrs {
				out = append(out, a.String())
			}
			slices.Sort(out)
			return out
		}
	}
	return nil
}

// A bootstrap list in DNS, as libp2p publishes its own: _dnsaddr TXT
// records with full addresses or further /dnsaddr names. The operator
// changes the records, and the next Resolve follows them.
func TestResolveDNSAddr(t *testing.T) {
	a, b, c := fixedID(t, 1), fixedID(t, 2), fixedID(t, 3)
	z := newZone(t)
	z.setTXT("_dnsaddr.boot.test.",
		"dnsaddr=/dnsaddr/eu.boot.test/p2p/"+b.String(), // libp2p's form: the name of one peer's records
		"dnsaddr=/ip4/192.0.2.1/tcp/4777/p2p/"+a.String(),
		"v=spf1 -all",                     // not a dnsaddr record
		"dnsaddr=/ip4/192.0.2.9/tcp/4777", // no peer id: unusable
		"dnsaddr=not a multiaddr",
	)
	z.setTXT("_dnsaddr.eu.boot.test.",
		"dnsaddr=/ip4/192.0.2.2/udp/4777/quic-v1/p2p/"+b.String(),
		"dnsaddr=/ip4/192.0.2.3/tcp/4777/p2p/"+a.String(), // not b's: the /p2p suffix filters it out
	)
	z.setTXT("_dnsaddr.loop.test.", "dnsaddr=/dnsaddr/loop.test")
	z.setA("host.test.", net.ParseIP("192.0.2.5").To4())
	r := z.resolver(t)

	list := List{
		Peers: []peer.AddrInfo{{ID: c, Addrs: []ma.Multiaddr{ma.StringCast("/dns4/host.test/tcp/4777")}}},
		Names: []ma.Multiaddr{ma.StringCast("/dnsaddr/boot.test"), ma.StringCast("/dnsaddr/loop.test"), ma.StringCast("/dnsaddr/missing.test")},
	}
	got, warns := list.Resolve(t.Context(), r)
	if want := []string{"/ip4/192.0.2.1/tcp/4777"}; !slices.Equal(addrsOf(got, a), want) {
		t.Errorf("peer a = %v, want %v", addrsOf(got, a), want)
	}
	if want := []string{"/ip4/192.0.2.2/udp/4777/quic-v1"}; !slices.Equal(addrsOf(got, b), want) {
		t.Errorf("peer b = %v, want %v", addrsOf(got, b), want)
	}
	if want := []string{"/ip4/192.0.2.5/tcp/4777"}; !slices.Equal(addrsOf(got, c), want) {
		t.Errorf("peer c = %v, want %v", addrsOf(got, c), want)
	}
	if len(got) != 3 {
		t.Errorf("peers = %v, want a, b and c", got)
	}
	if len(warns) != 2 || !errors.Is(warns[0].Err, ErrResolve) || !strings.Contains(warns[0].Entry, "loop.test") ||
		!strings.Contains(warns[0].Err.Error(), "levels of /dnsaddr") || !strings.Contains(warns[1].Entry, "missing.test") {
		t.Fatalf("warnings = %v, want the loop and the missing name", warns)
	}

	// A name with a peer id keeps only that peer's records.
	only := List{Peers: []peer.AddrInfo{{ID: b, Addrs: []ma.Multiaddr{ma.StringCast("/dnsaddr/boot.test")}}}}
	got, warns = only.Resolve(t.Context(), r)
	if len(got) != 1 || got[0].ID != b || len(warns) != 0 {
		t.Fatalf("/dnsaddr/boot.test/p2p/b = %v, %v", got, warns)
	}

	// The operator replaces the list; nothing is released.
	z.setTXT("_dnsaddr.boot.test.", "dnsaddr=/ip4/192.0.2.7/tcp/4777/p2p/"+c.String())
	got, _ = List{Names: list.Names[:1]}.Resolve(t.Context(), r)
	if len(got) != 1 || got[0].ID != c || addrsOf(got, c)[0] != "/ip4/192.0.2.7/tcp/4777" {
		t.Fatalf("after the change: %v", got)
	}

	// A resolver that does not answer costs only the DNS entries.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	mixed := List{Peers: []peer.AddrInfo{{ID: a, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/192.0.2.1/tcp/4777")}}}, Names: list.Names[:1]}
	got, warns = mixed.Resolve(ctx, r)
	if len(got) != 1 || got[0].ID != a || len(warns) != 1 {
		t.Fatalf("with a dead resolver: %v, %v", got, warns)
	}
}

// A hostile zone that fans out (10 names per level, each naming 10 more:
// 1 111 names within MaxDNSDepth) costs at most MaxDNSLookups queries,
// and the entry is a warning.
func TestResolveDNSAddrFanOut(t *testing.T) {
	z := newZone(t)
	var fan func(name string, depth int)
	fan = func(name string, depth int) {
		if depth == 0 {
			return
		}
		var recs []string
		for i := range 10 {
			child := fmt.Sprintf("%d.%s", i, name)
			recs = append(recs, "dnsaddr=/dnsaddr/"+child)
			fan(child, depth-1)
		}
		z.setTXT("_dnsaddr."+name+".", recs...)
	}
	fan("fan.test", 3)
	got, warns := List{Names: []ma.Multiaddr{ma.StringCast("/dnsaddr/fan.test")}}.Resolve(t.Context(), z.resolver(t))
	if len(got) != 0 || len(warns) != 1 || !errors.Is(warns[0].Err, ErrResolve) {
		t.Fatalf("fan-out = %v, %v", got, warns)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	// The Go resolver may retry a query or try a search domain; what
	// matters is that the fan-out is not followed.
	if z.queries < MaxDNSLookups || z.queries > 4*MaxDNSLookups {
		t.Fatalf("%d DNS queries for one entry, budget %d lookups", z.queries, MaxDNSLookups)
	}
	t.Logf("%d DNS queries (budget %d lookups)", z.queries, MaxDNSLookups)
}
