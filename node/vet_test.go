package node

import (
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

func TestPublicPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"/ip4/8.8.4.4/tcp/4777":                  "8.8.4.0/24",
		"/ip4/127.0.0.1/tcp/4777":                "",
		"/ip4/192.168.1.20/udp/4777/quic-v1":     "",
		"/ip4/203.0.113.9/tcp/1":                 "", // documentation range
		"/ip6/2a00:1450:4001:81b::200e/tcp/4777": "2a00:1450:4001::/48",
		"/ip6/::1/tcp/4777":                      "",
		"/dns4/example.com/tcp/4777":             "",
	} {
		if got := publicPrefix(ma.StringCast(in)); got != want {
			t.Errorf("publicPrefix(%s) = %q, want %q", in, got, want)
		}
	}
	if publicPrefix(nil) != "" {
		t.Error("nil address has a prefix")
	}
}
