package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() does not validate: %v", err)
	}
}

func TestSeed001Loads(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "seed-001.yaml"))
	if err != nil {
		t.Fatalf("seed-001 §13.2 reference does not load: %v", err)
	}
	u := c.Discovery.UDP
	if !u.Enabled || u.MulticastGroup != "224.0.0.1" || u.Port != 54321 ||
		u.BroadcastInterval.D() != 5*time.Second || u.Timeout.D() != 30*time.Second {
		t.Errorf("udp = %+v", u)
	}
	d := c.Discovery.DHT
	want := []BootstrapNode{{Host: "dht1.ooder.net", Port: 6881}}
	if !d.Enabled || d.ReplicationFactor != 3 || !reflect.DeepEqual(d.BootstrapNodes, want) {
		t.Errorf("dht = %+v", d)
	}
	s := c.Discovery.SkillCenter
	if !s.Enabled || s.URL != "https://skillcenter.ooder.net" || s.Timeout.D() != 10*time.Second ||
		!s.Cache.Enabled || s.Cache.TTL.D() != 300*time.Second {
		t.Errorf("skillCenter = %+v", s)
	}
	h := c.Discovery.HealthCheck
	if h.HeartbeatInterval.D() != 5*time.Second || h.Timeout.D() != 30*time.Second || h.RetryCount != 3 || h.UnhealthyThreshold != 3 || h.GossipBeatEvery != DefaultGossipBeatEvery {
		t.Errorf("healthCheck = %+v", h)
	}
	// Everything the seed does not mention keeps its default.
	def := Default()
	if c.DataDir != def.DataDir || c.API != def.API || c.Log != def.Log || c.Cache != def.Cache ||
		c.Discovery.MDNS != def.Discovery.MDNS || c.Trust.Policy != "open" {
		t.Errorf("defaults changed: %+v", c)
	}
	// The seed's bootstrap node has no peer id: it loads, but cannot be dialled.
	if _, err := d.BootstrapNodes[0].Addr(); !errors.Is(err, ErrNoPeerID) {
		t.Errorf("Addr() of a node without peer id: err = %v, want ErrNoPeerID", err)
	}
}

func TestBootstrapNodeAddr(t *testing.T) {
	id := testutil.PeerID(t)
	other := testutil.PeerID(t)
	cases := []struct {
		node    BootstrapNode
		want    string
		wantErr string
	}{
		{BootstrapNode{Host: "dht1.ooder.net", Port: 6881, PeerID: id.String()}, "/dns/dht1.ooder.net/tcp/6881/p2p/" + id.String(), ""},
		{BootstrapNode{Host: "192.0.2.7", Port: 4777, PeerID: id.String()}, "/ip4/192.0.2.7/tcp/4777/p2p/" + id.String(), ""},
		{BootstrapNode{Host: "2001:db8::1", Port: 4777, PeerID: id.String()}, "/ip6/2001:db8::1/tcp/4777/p2p/" + id.String(), ""},
		{BootstrapNode{Multiaddr: "/ip4/192.0.2.7/udp/4777/quic-v1/p2p/" + id.String()}, "/ip4/192.0.2.7/udp/4777/quic-v1/p2p/" + id.String(), ""},
		{BootstrapNode{Multiaddr: "/ip4/192.0.2.7/tcp/4777", PeerID: id.String()}, "/ip4/192.0.2.7/tcp/4777/p2p/" + id.String(), ""},
		{BootstrapNode{Multiaddr: "/ip4/192.0.2.7/tcp/4777/p2p/" + id.String(), PeerID: other.String()}, "", "differs"},
		{BootstrapNode{Multiaddr: "/ip4/192.0.2.7/tcp/4777"}, "", "no peer id"},
		{BootstrapNode{Multiaddr: "/p2p/" + id.String()}, "", "no transport address"},
		{BootstrapNode{Multiaddr: "nonsense"}, "", "not a multiaddr"},
		{BootstrapNode{Multiaddr: "/dnsaddr/boot.example.org"}, "/dnsaddr/boot.example.org", ""},
		{BootstrapNode{Multiaddr: "/dnsaddr/boot.example.org/p2p/" + id.String()}, "/dnsaddr/boot.example.org/p2p/" + id.String(), ""},
		{BootstrapNode{Multiaddr: "/dnsaddr/boot.example.org/tcp/1"}, "", "nothing may follow /dnsaddr"},
		{BootstrapNode{Multiaddr: "/dns4/boot.example.org/p2p/" + id.String()}, "", "needs /tcp or /udp"},
		{BootstrapNode{Multiaddr: "/unix/tmp/sock/p2p/" + id.String()}, "", "needs an /ip4"},
		{BootstrapNode{Host: "h", Port: 0, PeerID: id.String()}, "", "not a port"},
		{BootstrapNode{Host: "h", Port: 1, PeerID: "bogus"}, "", "peerId"},
	}
	for _, tc := range cases {
		a, err := tc.node.Addr()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: err = %v, want containing %q", tc.node, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.node, err)
			continue
		}
		if a.String() != tc.want {
			t.Errorf("%+v: addr = %s, want %s", tc.node, a, tc.want)
		}
		ai, err := tc.node.AddrInfo()
		if !strings.Contains(tc.want, "/p2p/") {
			// A /dnsaddr name: its TXT records name the peers.
			if !errors.Is(err, ErrNoPeerID) {
				t.Errorf("%+v: AddrInfo = %v, %v, want ErrNoPeerID", tc.node, ai, err)
			}
			continue
		}
		if err != nil || ai.ID != id || len(ai.Addrs) != 1 {
			t.Errorf("%+v: AddrInfo = %v, %v", tc.node, ai, err)
		}
	}
}

// TestBadFiles checks that every kind of bad file fails with
// "<file>:<line>: <field>: <reason>".
func TestBadFiles(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want string // the full first error line
	}{
		{"port out of range", `# agentd
log:
  level: info
discovery:
  udp:
    enabled: true
    port: 70000
`, "agentd.yaml:7: discovery.udp.port: 70000 is not a port (1-65535)"},
		{"unknown key", "discovery:\n  udp:\n    prot: 1\n",
			"agentd.yaml:3: discovery.udp.prot: unknown key; the keys under discovery.udp are: broadcastInterval, enabled, hmacKey, multicastGroup, port, timeout"},
		{"unknown top-level key", "logs: {}\n", "agentd.yaml:1: logs: unknown key;"},
		{"string for int", "discovery:\n  dht:\n    replicationFactor: three\n",
			`agentd.yaml:3: discovery.dht.replicationFactor: must be an integer, not a string "three"`},
		{"float for int", "cache:\n  maxSize: 1.5\n", `agentd.yaml:2: cache.maxSize: must be an integer, not a number with a fraction "1.5"`},
		{"string for bool", "cache:\n  enabled: yes\n", `agentd.yaml:2: cache.enabled: must be true or false, not a string "yes"`},
		{"scalar for mapping", "discovery: 5\n", `agentd.yaml:1: discovery: must be a mapping of keys to values, not an integer "5"`},
		{"scalar for list", "listen: /ip4/0.0.0.0/tcp/1\n", `agentd.yaml:1: listen: must be a list, not a string`},
		{"mapping for string", "dataDir: {a: 1}\n", `agentd.yaml:1: dataDir: must be a string, not a mapping`},
		{"bad duration", "cache:\n  ttl: soon\n", `agentd.yaml:2: cache.ttl: "soon" is neither milliseconds (5000) nor a duration ("5s")`},
		{"float duration", "cache:\n  ttl: 1.5\n", `agentd.yaml:2: cache.ttl: must be milliseconds (5000) or a duration ("5s"), not a number with a fraction "1.5"`},
		{"negative interval", "discovery:\n  healthCheck:\n    heartbeatInterval: -5\n",
			"agentd.yaml:3: discovery.healthCheck.heartbeatInterval: -5ms is out of range (10ms-24h0m0s)"},
		{"timeout below interval", "discovery:\n  udp:\n    broadcastInterval: 5000\n    timeout: 1000\n",
			"agentd.yaml:4: discovery.udp.timeout: 1s is shorter than discovery.udp.broadcastInterval 5s"},
		{"health timeout below interval (from default)", "discovery:\n  healthCheck:\n    timeout: 1s\n",
			"agentd.yaml:3: discovery.healthCheck.timeout: 1s is shorter than discovery.healthCheck.heartbeatInterval 5s"},
		{"quiet heartbeats past their bound", "discovery:\n  healthCheck:\n    gossipBeatEvery: 4\n",
			"agentd.yaml:3: discovery.healthCheck.gossipBeatEvery: 4 is out of range (1-3: one heartbeat in N on gossip)"},
		{"quiet heartbeats zero", "discovery:\n  healthCheck:\n    gossipBeatEvery: 0\n",
			"agentd.yaml:3: discovery.healthCheck.gossipBeatEvery: 0 is out of range (1-3: one heartbeat in N on gossip)"},
		{"bad policy", "trust:\n  policy: trusting\n", `agentd.yaml:2: trust.policy: "trusting" is not one of open, allowlist, ca`},
		{"bad uuid", "trust:\n  policy: allowlist\n  allowList:\n    - 0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091\n    - not-a-uuid\n",
			`agentd.yaml:5: trust.allowList[1]: "not-a-uuid" is not a UUID in canonical form (36 characters)`},
		{"uuid v1", "trust:\n  allowList: [6ba7b810-9dad-11d1-80b4-00c04fd430c8]\n",
			`agentd.yaml:2: trust.allowList[0]: "6ba7b810-9dad-11d1-80b4-00c04fd430c8" is not an RFC 4122 version-4 UUID (agent ids are UUIDv4)`},
		{"empty allowlist", "trust:\n  policy: allowlist\n", "agentd.yaml:1: trust.allowList: is empty, so policy allowlist would admit no agent"},
		{"ca without roots", "trust:\n  policy: ca\n", "agentd.yaml:1: trust.roots: is empty; policy ca needs at least one root certificate"},
		{"not multicast", "discovery:\n  udp:\n    multicastGroup: 192.168.1.1\n",
			`agentd.yaml:3: discovery.udp.multicastGroup: "192.168.1.1" is not an IPv4 multicast address (224.0.0.0/4)`},
		{"ipv6 multicast", "discovery:\n  udp:\n    multicastGroup: ff02::1\n",
			`agentd.yaml:3: discovery.udp.multicastGroup: "ff02::1" is not an IPv4 multicast address (224.0.0.0/4)`},
		{"connections low above high", "connections:\n  lowWater: 100\n",
			"agentd.yaml:1: connections.highWater: 64 must be above connections.lowWater (100)"},
		{"connections grace", "connections:\n  gracePeriod: 2h\n",
			"agentd.yaml:2: connections.gracePeriod: 2h0m0s is out of range (0 = default 3s; 1s-1h)"},
		{"log level", "log:\n  level: verbose\n", `agentd.yaml:2: log.level: "verbose" is not one of debug, info, warn, error`},
		{"log format", "log:\n  format: xml\n", `agentd.yaml:2: log.format: "xml" is not one of text, json`},
		{"skillcenter without url", "discovery:\n  skillCenter:\n    enabled: true\n",
			"agentd.yaml:2: discovery.skillCenter.url: is required when discovery.skillCenter.enabled is true"},
		{"skillcenter ftp", "discovery:\n  skillCenter:\n    url: ftp://x\n", `agentd.yaml:3: discovery.skillCenter.url: "ftp://x" is not an http:// or https:// URL`},
		{"api not loopback", "api:\n  addr: 0.0.0.0:4778\n",
			"agentd.yaml:2: api.addr: 0.0.0.0:4778 is not a loopback address; the API registers and removes agents, so serving it beyond this machine needs auth (set api.jwtSecret or api.jwtPublicKey)"},
		{"api short secret", "api:\n  addr: 0.0.0.0:4778\n  jwtSecret: short\n", "agentd.yaml:3: api.jwtSecret: is 5 bytes; an HS256 secret needs at least 32"},
		{"api hostname", "api:\n  addr: example.com:4778\n", `agentd.yaml:2: api.addr: host "example.com" must be an IP address or localhost`},
		{"api no port", "api:\n  addr: 127.0.0.1\n", `agentd.yaml:2: api.addr: "127.0.0.1" is not host:port (e.g. 127.0.0.1:4778)`},
		{"listen not multiaddr", "listen:\n  - /ip4/0.0.0.0/tcp/4777\n  - tcp://0.0.0.0:4777\n", `agentd.yaml:3: listen[1]: "tcp://0.0.0.0:4777" is not a multiaddr`},
		{"bootstrap both forms", "discovery:\n  dht:\n    bootstrapNodes:\n      - host: a\n        port: 1\n        multiaddr: /ip4/1.2.3.4/tcp/1\n",
			"agentd.yaml:4: discovery.dht.bootstrapNodes[0]: give either multiaddr or host and port, not both"},
		{"bootstrap bad port", "discovery:\n  dht:\n    bootstrapNodes:\n      - host: a\n        port: 0\n",
			"agentd.yaml:5: discovery.dht.bootstrapNodes[0].port: 0 is not a port (1-65535)"},
		{"bootstrap bad peer id", "discovery:\n  dht:\n    bootstrapNodes:\n      - host: a\n        port: 1\n        peerId: xyz\n",
			`agentd.yaml:6: discovery.dht.bootstrapNodes[0].peerId: "xyz" is not a libp2p peer id`},
		{"cache refresh too late", "cache:\n  ttl: 60s\n  refreshBeforeExpiry: 2m\n", "agentd.yaml:3: cache.refreshBeforeExpiry: 2m0s is not shorter than cache.ttl 1m0s"},
		{"cache size", "cache:\n  maxSize: 0\n", "agentd.yaml:2: cache.maxSize: 0 is out of range (1-10000000)"},
		{"duplicate key", "log:\n  level: info\n  level: debug\n", "agentd.yaml:3: log.level: is given twice (first on line 2)"},
		{"merge key", "base: &b\n  level: info\nlog:\n  <<: *b\n", "agentd.yaml:1: base: unknown key;"},
		{"merge key in known section", "log:\n  <<: {level: info}\n", "agentd.yaml:2: log: merge keys and non-scalar keys are not supported; write the keys out"},
		{"interface name", "discovery:\n  interface: \"eth0 eth1\"\n", `agentd.yaml:2: discovery.interface: "eth0 eth1" is not a network interface name`},
		{"syntax", "log:\n\tlevel: info\n", "agentd.yaml:2: YAML syntax: found character that cannot start any token"},
		{"two documents", "log:\n  level: info\n---\nlog:\n  level: debug\n", "agentd.yaml:3: holds a second YAML document; a configuration file holds one"},
		{"top-level list", "- a\n- b\n", "agentd.yaml:1: must be a mapping of keys to values, not a list"},
		{"mdns ttl", "discovery:\n  mdns:\n    ttl: 500ms\n", "agentd.yaml:3: discovery.mdns.ttl: 500ms is out of range (1s-24h0m0s; DNS TTLs count whole seconds)"},
		{"revoked serial", "trust:\n  revokedSerials: [\"zz\"]\n", `agentd.yaml:2: trust.revokedSerials[0]: "zz" is not a certificate serial number in hex (colons allowed)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agentd.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for\n%s", tc.yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if !strings.HasPrefix(first, tc.want) {
				t.Errorf("error:\n got  %s\n want %s", first, tc.want)
			}
			fes := FieldErrors(err)
			if len(fes) == 0 || fes[0].File != "agentd.yaml" || fes[0].Line == 0 {
				t.Errorf("FieldErrors = %+v, want file and line", fes)
			}
		})
	}
}

func TestAllProblemsReported(t *testing.T) {
	_, err := Parse("a.yaml", []byte("log:\n  level: loud\n  format: xml\ncache:\n  maxSize: -1\n"))
	fes := FieldErrors(err)
	var got []string
	for _, fe := range fes {
		got = append(got, fe.File+":"+strconv.Itoa(fe.Line)+":"+fe.Field)
	}
	want := []string{"a.yaml:5:cache.maxSize", "a.yaml:2:log.level", "a.yaml:3:log.format"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v (err %v)", got, want, err)
	}
}

func TestEmptyValuesKeepDefaults(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "discovery:\n", "discovery:\n  udp:\n  dht: ~\n", "---\n"} {
		c, err := Parse("x.yaml", []byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("%q: config differs from the defaults: %+v", doc, c)
		}
	}
}

func TestListsReplaceDefaults(t *testing.T) {
	c, err := Parse("x.yaml", []byte("listen: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen == nil || len(c.Listen) != 0 {
		t.Errorf("listen: [] = %#v, want empty non-nil (listen nowhere)", c.Listen)
	}
}

func TestDurationForms(t *testing.T) {
	c, err := Parse("x.yaml", []byte(`cache:
  ttl: 300000
  refreshBeforeExpiry: "1m"
discovery:
  udp:
    broadcastInterval: 1500ms
    timeout: "30000"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache.TTL.D() != 5*time.Minute || c.Cache.RefreshBeforeExpiry.D() != time.Minute ||
		c.Discovery.UDP.BroadcastInterval.D() != 1500*time.Millisecond || c.Discovery.UDP.Timeout.D() != 30*time.Second {
		t.Errorf("durations = %v %v %v %v", c.Cache.TTL, c.Cache.RefreshBeforeExpiry, c.Discovery.UDP.BroadcastInterval, c.Discovery.UDP.Timeout)
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5000", 5 * time.Second, true},
		{"0", 0, true},
		{"-250", -250 * time.Millisecond, true},
		{"+7", 7 * time.Millisecond, true},
		{"5s", 5 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{" 10ms ", 10 * time.Millisecond, true},
		{"", 0, false},
		{"5 s", 0, false},
		{"1.5", 0, false},
		{"99999999999999999999", 0, false},
		{"9223372036854775807", 0, false},
		{"9223372036854", 9223372036854 * time.Millisecond, true},
		{strings.Repeat("1", 65), 0, false},
	}
	for _, tc := range cases {
		d, err := ParseDuration(tc.in)
		if (err == nil) != tc.ok || (tc.ok && d.D() != tc.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v ok=%v", tc.in, d, err, tc.want, tc.ok)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	for in, want := range map[string]time.Duration{`5000`: 5 * time.Second, `"2s"`: 2 * time.Second, `"750"`: 750 * time.Millisecond} {
		if err := d.UnmarshalJSON([]byte(in)); err != nil || d.D() != want {
			t.Errorf("UnmarshalJSON(%s) = %v, %v", in, d, err)
		}
	}
	if err := d.UnmarshalJSON([]byte(`true`)); err == nil {
		t.Error("UnmarshalJSON(true) succeeded")
	}
	b, err := Duration(1500 * time.Millisecond).MarshalJSON()
	if err != nil || string(b) != `"1.5s"` {
		t.Errorf("MarshalJSON = %s, %v", b, err)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	seed, err := Load(filepath.Join("testdata", "seed-001.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	full := Default()
	full.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	full.API.JWTSecret = strings.Repeat("s", 40)
	full.Discovery.UDP.HMACKey = "k"
	full.Trust.AllowList = []string{"0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091"}
	full.Discovery.DHT.BootstrapNodes = []BootstrapNode{{Multiaddr: "/ip4/192.0.2.1/tcp/4777"}}
	for name, c := range map[string]Config{"default": Default(), "seed": seed, "full": full} {
		y, err := c.YAML()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(name, y)
		if err != nil {
			t.Fatalf("%s: re-parse of\n%s\n: %v", name, y, err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Errorf("%s: round trip changed the config:\n%+v\n%+v", name, c, back)
		}
	}
}

func TestRedacted(t *testing.T) {
	c := Default()
	c.API.JWTSecret = "supersecretsupersecretsupersecret!"
	c.Discovery.UDP.HMACKey = "hmac-key-value"
	c.Registry.Token = "bearer-token-value"
	c.Listen = []string{"/ip4/127.0.0.1/tcp/1"}
	r := c.Redacted()
	for _, out := range []func() ([]byte, error){r.YAML, r.JSON} {
		b, err := out()
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"supersecret", "hmac-key-value", "bearer-token-value"} {
			if strings.Contains(string(b), secret) {
				t.Errorf("redacted output holds %q:\n%s", secret, b)
			}
		}
		if !strings.Contains(string(b), Redacted) {
			t.Errorf("redacted output does not say %s:\n%s", Redacted, b)
		}
	}
	if c.API.JWTSecret == Redacted {
		t.Error("Redacted modified the original")
	}
	r.Listen[0] = "changed"
	if c.Listen[0] == "changed" {
		t.Error("Redacted shares the listen slice")
	}
	// Empty secrets stay empty, so the output does not suggest one is set.
	if d := Default().Redacted(); d.API.JWTSecret != "" || d.Registry.Token != "" {
		t.Errorf("empty secrets redacted: %+v", d)
	}
}

func TestJSONKeysMatchYAML(t *testing.T) {
	b, err := Default().JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"dataDir"`, `"multicastGroup"`, `"heartbeatInterval": "5s"`, `"refreshBeforeExpiry": "1m0s"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s:\n%s", k, b)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.HasPrefix(err.Error(), big+": is larger than") {
		t.Errorf("big file: err = %v", err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("log:\n  level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(good)
	if err != nil || c.Log.Level != "debug" {
		t.Errorf("Load(good) = %+v, %v", c.Log, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: log.level: ") {
		t.Errorf("Load(bad) err = %v", err)
	}
}

func TestListLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("trust:\n  roots:\n")
	for i := 0; i <= MaxListLen; i++ {
		b.WriteString("    - r\n")
	}
	_, err := Parse("x.yaml", []byte(b.String()))
	if err == nil || !strings.HasPrefix(err.Error(), "x.yaml:3: trust.roots: has 1025 entries; the limit is 1024") {
		t.Errorf("err = %v", err)
	}
}

func TestAliasBomb(t *testing.T) {
	// A billion-laughs document fails on the first nested list instead of
	// expanding: every list agentd reads holds scalars or flat mappings.
	doc := `trust:
  roots: &a ["x","x","x","x","x","x","x","x","x"]
  intermediates: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  crls: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  revokedSerials: [*c,*c,*c,*c,*c,*c,*c,*c,*c]
`
	_, err := Parse("bomb.yaml", []byte(doc))
	if err == nil || !strings.HasPrefix(err.Error(), "bomb.yaml:2: trust.intermediates[0]: must be a string, not a list") {
		t.Fatalf("err = %v", err)
	}
}

func TestAliasesResolve(t *testing.T) {
	c, err := Parse("x.yaml", []byte("trust:\n  roots: &r [a.pem, b.pem]\n  intermediates: *r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Trust.Intermediates, []string{"a.pem", "b.pem"}) {
		t.Errorf("intermediates = %v", c.Trust.Intermediates)
	}
}

func TestExpandHome(t *testing.T) {
	t.Setenv("HOME", "/home/agent")
	cases := map[string]string{"~": "/home/agent", "~/.agentd": "/home/agent/.agentd", "/var/lib/agentd": "/var/lib/agentd", "rel/dir": "rel/dir"}
	for in, want := range cases {
		got, err := ExpandHome(in)
		if err != nil || got != want {
			t.Errorf("ExpandHome(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ExpandHome("~other/x"); err == nil {
		t.Error("~other expanded")
	}
	t.Setenv("HOME", "")
	if _, err := ExpandHome("~/.agentd"); err == nil || !strings.Contains(err.Error(), "$HOME") {
		t.Errorf("unset HOME: err = %v", err)
	}
}
