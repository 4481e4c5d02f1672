package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// FuzzLoopbackHost checks the Host-header guard of the local API: it
// accepts only localhost and loopback addresses, and a port never changes
// the decision.
func FuzzLoopbackHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:4778", "localhost", "[::1]:80", "[::1]", "::1", "example.com:80", "10.0.0.1", "127.0.0.1.nip.io", "[::ffff:127.0.0.1]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := loopbackHost(s)
		host := s
		if h, _, err := net.SplitHostPort(s); err == nil {
			host = h
		} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			host = s[1 : len(s)-1]
		}
		if got {
			ip, err := netip.ParseAddr(host)
			if host != "localhost" && (err != nil || !ip.IsLoopback()) {
				t.Fatalf("loopbackHost(%q) accepted host %q, which is neither localhost nor a loopback address", s, host)
			}
		}
		if host != "" && !strings.ContainsAny(host, "[]") {
			if withPort := loopbackHost(net.JoinHostPort(host, "4778")); withPort != loopbackHost(host) {
				t.Fatalf("loopbackHost(%q) = %v but with a port = %v", host, loopbackHost(host), withPort)
			}
		}
	})
}
