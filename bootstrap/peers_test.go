package bootstrap

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd/config"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func fixedID(t testing.TB, seed byte) peer.ID {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestParseAddr(t *testing.T) {
	id := fixedID(t, 1)
	for _, ok := range []string{
		"/ip4/203.0.113.7/tcp/4777/p2p/" + id.String(),
		"/ip6/2001:db8::7/udp/4777/quic-v1/p2p/" + id.String(),
		"/ip4/10.0.0.1/tcp/4777/ws/p2p/" + id.String(),
		"/dns4/boot.example.org/tcp/4777/p2p/" + id.String(),
		"/dnsaddr/bootstrap.example.org/p2p/" + id.String(),
		"/dns/boot.example.org/udp/4777/quic-v1/p2p/" + id.String(),
	} {
		ai, err := ParseAddr(ok)
		if err != nil || ai.ID != id || len(ai.Addrs) != 1 {
			t.Errorf("ParseAddr(%s) = %v, %v", ok, ai, err)
		}
		if got := Multiaddrs(ai)[0].String(); got != ok {
			t.Errorf("Multiaddrs round trip = %s, want %s", got, ok)
		}
	}
	for in, want := range map[string]error{
		"/ip4/203.0.113.7/tcp/4777":                           ErrNoPeerID,
		"/dnsaddr/bootstrap.example.org":                      ErrNoPeerID, // a name, not an address: Parse keeps it
		"/dnsaddr/b.example.org/tcp/1/p2p/" + id.String():     ErrBadAddr,
		"/dns4/boot.example.org/p2p/" + id.String():           ErrBadAddr,
		"/unix/tmp/x/p2p/" + id.String():                      ErrBadAddr,
		"/p2p/" + id.String():                                 ErrBadAddr,
		"/ip4/203.0.113.7/p2p/" + id.String():                 ErrBadAddr,
		"203.0.113.7:4777":                                    ErrBadAddr,
		"/ip4/999.0.0.1/tcp/1/p2p/" + id.String():             ErrBadAddr,
		"/ip4/1.2.3.4/tcp/1/p2p/notapeer":                     ErrBadAddr,
		"/ip4/1.2.3.4/tcp/1/p2p/" + strings.Repeat("a", 2000): ErrBadAddr,
	} {
		if _, err := ParseAddr(in); !errors.Is(err, want) {
			t.Errorf("ParseAddr(%.60s) = %v, want %v", in, err, want)
		}
	}
}

func TestParseList(t *testing.T) {
	a, b, c := fixedID(t, 1), fixedID(t, 2), fixedID(t, 3)
	cfg := config.DHTConfig{BootstrapNodes: []config.BootstrapNode{
		{Host: "dht1.ooder.net", Port: 6881},                             // the seed's form: no peer id
		{Host: "dht2.ooder.net", Port: 6881, PeerID: b.String()},         // a DNS name with the peer id
		{Host: "192.0.2.9", Port: 4777, PeerID: b.String()},              // ok, same peer
		{Multiaddr: "/ip4/192.0.2.1/udp/4777/quic-v1/p2p/" + a.String()}, // same peer as a flag
		{Multiaddr: "/ip6/2001:db8::3/tcp/4777", PeerID: c.String()},     // ok
		{Multiaddr: "/dnsaddr/bootstrap.example.org"},                    // a name: its TXT records list the peers
	}}
	flags := []string{
		"/ip4/192.0.2.1/tcp/4777/p2p/" + a.String(),
		"/ip4/192.0.2.2/tcp/4777",        // no peer id: warning
		"/dnsaddr/bootstrap.example.org", // the same name again
	}
	list, warns, err := Parse(cfg, flags)
	if err != nil {
		t.Fatal(err)
	}
	peers := list.Peers
	if len(peers) != 3 || peers[0].ID != a || peers[1].ID != b || peers[2].ID != c {
		t.Fatalf("peers = %v", peers)
	}
	if len(peers[0].Addrs) != 2 || len(peers[1].Addrs) != 2 {
		t.Fatalf("entries of one peer were not merged: %v", peers)
	}
	if len(list.Names) != 1 || list.Names[0].String() != "/dnsaddr/bootstrap.example.org" {
		t.Fatalf("names = %v", list.Names)
	}
	if !list.HasDNS() || list.Empty() {
		t.Fatal("HasDNS/Empty wrong")
	}
	if len(warns) != 2 {
		t.Fatalf("warnings = %v, want 2", warns)
	}
	if !errors.Is(warns[0].Err, ErrNoPeerID) || warns[0].Source != "flag" ||
		!errors.Is(warns[1].Err, ErrNoPeerID) || warns[1].Source != "config" {
		t.Fatalf("warnings = %v", warns)
	}
	if !strings.Contains(warns[1].String(), "dht1.ooder.net:6881") {
		t.Fatalf("warning does not name the entry: %s", warns[1])
	}
	// A malformed flag is an error naming the flag.
	for _, bad := range []string{"nonsense", "/dns4/x/p2p/" + a.String(), "/dnsaddr/x/tcp/1"} {
		if _, _, err := Parse(config.DHTConfig{}, []string{bad}); err == nil || !strings.Contains(err.Error(), "--bootstrap") {
			t.Fatalf("Parse(%q) = %v", bad, err)
		}
	}
	// The built-in list is empty.
	if len(Builtin) != 0 {
		t.Fatalf("built-in list is not empty: %v", Builtin)
	}
	if l, err := Peers(config.DHTConfig{}, nil); err != nil || !l.Empty() || l.HasDNS() {
		t.Fatalf("empty list = %v, %v", l, err)
	}
	// IP entries resolve to themselves without a resolver.
	ip := List{Peers: []peer.AddrInfo{peers[2]}}
	if got, warns := ip.Resolve(t.Context(), nil); len(got) != 1 || got[0].ID != c || len(warns) != 0 {
		t.Fatalf("Resolve of an IP list = %v, %v", got, warns)
	}
}

// FuzzParseAddr: an accepted entry formats back to a multiaddr that parses
// to the same peer and address.
func FuzzParseAddr(f *testing.F) {
	id := fixedID(f, 1).String()
	f.Add("/ip4/203.0.113.7/tcp/4777/p2p/" + id)
	f.Add("/ip6/::1/udp/4777/quic-v1/p2p/" + id)
	f.Add("/dns4/x/tcp/1/p2p/" + id)
	f.Add("/ip4/1.2.3.4/tcp/1")
	f.Fuzz(func(t *testing.T, s string) {
		ai, err := ParseAddr(s)
		if err != nil {
			return
		}
		if ai.ID.Validate() != nil || len(ai.Addrs) != 1 {
			t.Fatalf("accepted %q as %v", s, ai)
		}
		full := Multiaddrs(ai)
		if len(full) != 1 {
			t.Fatalf("cannot format %v", ai)
		}
		ai2, err := ParseAddr(full[0].String())
		if err != nil {
			t.Fatalf("formatted %s refused: %v", full[0], err)
		}
		if ai2.ID != ai.ID || !ai2.Addrs[0].Equal(ai.Addrs[0]) {
			t.Fatalf("round trip %v → %v", ai, ai2)
		}
	})
}
