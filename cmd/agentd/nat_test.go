package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/internal/testutil"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The DHT mode follows the configuration, and mode auto starts as a
// client only on a node that joins the internet.
func TestDHTModeFromConfig(t *testing.T) {
	id := testutil.PeerID(t).String()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name, mode string
		clientMode bool
		boot       string
		client     bool
		auto       bool
		first      bool
	}{
		{"auto on the internet", "auto", false, "/ip4/11.77.0.1/tcp/4777/p2p/" + id, false, true, true},
		{"auto on a LAN", "auto", false, "/ip4/192.168.1.9/tcp/4777/p2p/" + id, false, true, false},
		{"auto on loopback", "", false, "/ip4/127.0.0.1/tcp/4777/p2p/" + id, false, true, false},
		{"auto, no bootstrap", "auto", false, "", false, true, false},
		{"server", "server", false, "/ip4/11.77.0.1/tcp/4777/p2p/" + id, false, false, false},
		{"client", "client", false, "", true, false, false},
		{"clientMode wins", "server", true, "", true, false, false},
	} {
		cfg := config.Default()
		cfg.Discovery.DHT.Mode, cfg.Discovery.DHT.ClientMode = c.mode, c.clientMode
		if c.boot != "" {
			cfg.Discovery.DHT.BootstrapNodes = []config.BootstrapNode{{Multiaddr: c.boot}}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		nc, err := daemon.NodeConfig(t.Context(), cfg, log)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if nc.DHT.ClientMode != c.client || nc.DHT.AutoMode != c.auto || nc.DHT.AutoClientFirst != c.first {
			t.Errorf("%s: client=%v auto=%v clientFirst=%v, want %v %v %v", c.name,
				nc.DHT.ClientMode, nc.DHT.AutoMode, nc.DHT.AutoClientFirst, c.client, c.auto, c.first)
		}
	}
}

// The nat section maps onto the host's options; zero relay limits take
// go-libp2p's defaults, agentd's defaults raise the per-IP ones.
func TestNATConfig(t *testing.T) {
	cfg := config.Default()
	cfg.NAT.Announce = []string{"/ip4/198.51.100.7/tcp/4777"}
	cfg.NAT.Relay.ConnDuration = config.Duration(5 * time.Minute)
	n, err := daemon.NATConfig(cfg.NAT, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if !n.PortMapping || !n.HolePunching || !n.AutoRelay || !n.NATService || n.RelayService || n.Relays != nil {
		t.Fatalf("defaults: %+v", n)
	}
	if len(n.Announce) != 1 || n.Announce[0].String() != "/ip4/198.51.100.7/tcp/4777" {
		t.Fatalf("announce = %v", n.Announce)
	}
	r := n.RelayResources
	if r.MaxReservations != 1024 || r.MaxReservationsPerIP != 64 || r.MaxCircuits != 16 || r.ReservationTTL != time.Hour ||
		r.Limit.Duration != 5*time.Minute || r.Limit.Data != 128<<10 {
		t.Fatalf("relay resources = %+v, limit %+v", r, *r.Limit)
	}
	boot := []peer.AddrInfo{{ID: testutil.PeerID(t)}}
	n, err = daemon.NATConfig(cfg.NAT, boot, true)
	if err != nil || !n.RelayService || n.Relays == nil || len(n.Relays()) != 1 {
		t.Fatalf("bootstrap: %+v, %v", n, err)
	}
	cfg.NAT.Announce = []string{"/ip4/198.51.100.7/tcp/4777/p2p/" + boot[0].ID.String()}
	if err := cfg.Validate(); err == nil {
		t.Fatal("an announce address with a peer id was accepted")
	}
	cfg.NAT.Announce = []string{"not a multiaddr"}
	if err := cfg.Validate(); err == nil {
		t.Fatal("a malformed announce address was accepted")
	}
}

// `agentd bootstrap --help` lists what applies to a bootstrap node; the
// daemon-only flags are hidden but still accepted (a shared environment
// sets them for every command).
func TestBootstrapHelpHidesDaemonFlags(t *testing.T) {
	r := runCLI(t, "", "bootstrap", "--help")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"--listen", "--api", "--bootstrap", "--announce", "--reachability", "--no-port-mapping", "circuit relay"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bootstrap --help lacks %s", want)
		}
	}
	for _, hidden := range bootstrapIgnored {
		if strings.Contains(r.stdout, "--"+hidden+" ") {
			t.Errorf("bootstrap --help shows --%s, which does not apply", hidden)
		}
	}
	if r := runCLI(t, "", "bootstrap", "--no-lan", "--scope", "full", "--help"); r.code != exitOK {
		t.Fatalf("a hidden flag was refused: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "run", "--help"); !strings.Contains(r.stdout, "--no-lan") || !strings.Contains(r.stdout, "--dht-mode") {
		t.Fatalf("run --help lost its flags:\n%s", r.stdout)
	}
}

// A --bootstrap entry that is a multiaddr but no bootstrap address is a
// configuration error naming the flag, not a warning the daemon runs past.
func TestBadBootstrapFlag(t *testing.T) {
	for _, bad := range []string{"/dnsaddr/x/tcp/1", "/dns4/x/p2p/" + testutil.PeerID(t).String(), "nonsense"} {
		r := runCLI(t, "", "--data-dir", t.TempDir(), "config", "print", "--bootstrap", bad)
		if r.code == exitOK || !strings.Contains(r.stderr, "--bootstrap") {
			t.Errorf("--bootstrap %s: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}
