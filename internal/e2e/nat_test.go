package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The NAT test (issue 14) builds a small internet in network namespaces:
//
//	inet    11.77.0.1/24 on a bridge: `agentd bootstrap` (DHT server,
//	        circuit relay v2, AutoNAT) and a DNS server holding the
//	        bootstrap list as _dnsaddr TXT records
//	nat-a   11.77.0.11 ⇄ 192.168.1.1   masquerade, port-preserving
//	nat-b   11.77.0.12 ⇄ 192.168.2.1   masquerade, port-preserving
//	nat-c   11.77.0.13 ⇄ 192.168.3.1   masquerade fully-random (symmetric)
//	home-X  192.168.N.2, default route through nat-X: `agentd run`
//
// 11.77.0.0/24 is a range go-multiaddr counts as public (the documentation
// ranges are "unroutable" to it, and AutoNAT and AutoRelay would ignore
// them); nothing routes out of these namespaces. The NATs forward only what
// their home side started (conntrack: address- and port-dependent
// filtering), so an agent at home cannot be dialled from the internet, and
// drop what reaches the router itself unasked, as a home router's firewall
// does. That matters for hole punching: an unsolicited packet that reached
// the router's own stack would leave a conntrack entry behind, and the
// home agent's own packet to the same peer, a moment later, would then be
// given another port to avoid the clash (dropped before confirmation, the
// packet leaves no entry). Real routers see the same race; DCUtR's timing
// makes it rare when links have latency, and these links have none.
//
// Two NATs that keep the source port let DCUtR's simultaneous open through
// both; a symmetric NAT gives every destination its own port, so the
// address the bootstrap node observed is useless to anybody else and only
// the relay can carry the connection. That is why the test has three homes
// and not two: with one port-preserving and one symmetric NAT there is no
// pair that can hole punch.
const (
	natInetNet   = "11.77.0"
	natBootstrap = natInetNet + ".1"
	natDNSName   = "boot.agentd.test"
)

type natHome struct {
	name      string
	symmetric bool
	ns        *nsHandle
	d         *nsDaemon
}

// natNet is the namespaces' internet with its bootstrap node running.
type natNet struct {
	inet *nsHandle
	boot *nsDaemon
	root string
}

// newNATNet builds the internet segment, a NAT and a home namespace per
// home, the DNS server with the bootstrap list, and starts the bootstrap
// node. It skips the test loudly where namespaces cannot be made.
func newNATNet(t *testing.T, homes []*natHome) *natNet {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.SkipEnv(t, "SKIP (environment): the NAT test builds network namespaces and needs root; it did not run")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipEnv(t, "SKIP (environment): the NAT test needs %s (iproute2, nftables); it did not run", tool)
		}
	}
	if os.Getenv("AGENTD_NAT_DEBUG") != "" {
		t.Setenv("GOLOG_LOG_LEVEL", "error,p2p-holepunch=debug,autorelay=debug,autonat=debug")
	}
	inet := newNS(t, "inet")
	sh(t, inet,
		"ip link set lo up",
		"ip link add br0 type bridge",
		"ip addr add "+natBootstrap+"/24 dev br0",
		"ip link set br0 up",
	)
	for i, h := range homes {
		n := i + 1
		nat := newNS(t, "nat-"+h.name)
		h.ns = newNS(t, "home-"+h.name)
		wan, lan := fmt.Sprintf("%s.1%d", natInetNet, n), fmt.Sprintf("192.168.%d", n)
		// The veth ends are created in the root namespace under unique
		// names and moved, so parallel runs do not collide.
		w0, w1 := inet.Name[:6]+"w"+h.name+"0", inet.Name[:6]+"w"+h.name+"1"
		l0, l1 := inet.Name[:6]+"l"+h.name+"0", inet.Name[:6]+"l"+h.name+"1"
		runOK(t, "ip", "link", "add", w0, "type", "veth", "peer", "name", w1)
		runOK(t, "ip", "link", "set", w0, "netns", inet.Name)
		runOK(t, "ip", "link", "set", w1, "netns", nat.Name)
		runOK(t, "ip", "link", "add", l0, "type", "veth", "peer", "name", l1)
		runOK(t, "ip", "link", "set", l0, "netns", nat.Name)
		runOK(t, "ip", "link", "set", l1, "netns", h.ns.Name)
		sh(t, inet, "ip link set "+w0+" master br0", "ip link set "+w0+" up")
		sh(t, nat,
			"ip link set lo up",
			"ip link set "+w1+" name wan", "ip addr add "+wan+"/24 dev wan", "ip link set wan up",
			"ip link set "+l0+" name lan", "ip addr add "+lan+".1/24 dev lan", "ip link set lan up",
			"sysctl -qw net.ipv4.ip_forward=1",
		)
		masq := "masquerade persistent"
		if h.symmetric {
			masq = "masquerade fully-random"
		}
		nft(t, nat, `table ip nat {
	chain post {
		type nat hook postrouting priority srcnat;
		oifname "wan" `+masq+`
	}
}
table ip filter {
	chain forwarding {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" oifname "wan" accept
	}
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname { "lo", "lan" } accept
	}
}`)
		sh(t, h.ns,
			"ip link set lo up",
			"ip link set "+l1+" name eth0", "ip addr add "+lan+".2/24 dev eth0", "ip link set eth0 up",
			"ip route add default via "+lan+".1",
		)
		// ip netns exec mounts /etc/netns/<ns>/resolv.conf over
		// /etc/resolv.conf: the daemon resolves the bootstrap list
		// through the test's DNS server, with the system resolver.
		dir := filepath.Join("/etc/netns", h.ns.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+natBootstrap+"\noptions timeout:1 attempts:2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	root := t.TempDir()
	boot := startNSDaemon(t, inet, "bootstrap", filepath.Join(root, "boot"), "bootstrap",
		"--listen", "/ip4/"+natBootstrap+"/tcp/4777", "--listen", "/ip4/"+natBootstrap+"/udp/4777/quic-v1")
	var bootAddrs []string
	eventually(t, 20*time.Second, "the bootstrap node printing its addresses", func() bool {
		bootAddrs = nil
		for _, l := range strings.Split(boot.stdout.String(), "\n") {
			if strings.HasPrefix(l, "/ip4/"+natBootstrap+"/") {
				bootAddrs = append(bootAddrs, strings.TrimSpace(l))
			}
		}
		return len(bootAddrs) == 2
	})
	serveDNS(t, inet, "_dnsaddr."+natDNSName+".", bootAddrs)
	return &natNet{inet: inet, boot: boot, root: root}
}

// startHomeDaemon starts `agentd run` in a home, joining through the
// bootstrap list in DNS, listening on port (TCP and QUIC).
func (n *natNet) startHomeDaemon(t *testing.T, home *natHome, name string, port int) *nsDaemon {
	t.Helper()
	p := strconv.Itoa(port)
	return startNSDaemon(t, home.ns, name, filepath.Join(n.root, name), "run",
		"--listen", "/ip4/0.0.0.0/tcp/"+p, "--listen", "/ip4/0.0.0.0/udp/"+p+"/quic-v1",
		"--no-lan", "--bootstrap", "/dnsaddr/"+natDNSName)
}

// waitRelayed waits until d is private, a DHT client, with a relay address.
func waitRelayed(t *testing.T, d *nsDaemon, within time.Duration) {
	t.Helper()
	eventually(t, within, d.name+" private, DHT client, with a relay address", func() bool {
		var hz struct {
			Reachability string   `json:"reachability"`
			DHTMode      string   `json:"dht_mode"`
			Listen       []string `json:"listen"`
		}
		if !d.getJSON("/healthz", &hz) {
			return false
		}
		return hz.Reachability == "private" && hz.DHTMode == "client" &&
			slices.ContainsFunc(hz.Listen, func(a string) bool { return strings.Contains(a, "/p2p-circuit") })
	})
}

func TestNATTraversal(t *testing.T) {
	homes := []*natHome{{name: "a"}, {name: "b"}, {name: "c", symmetric: true}}
	net := newNATNet(t, homes)
	boot := net.boot

	start := time.Now()
	for _, h := range homes {
		h.d = net.startHomeDaemon(t, h, "home-"+h.name, 4777)
	}
	// Each learns that it is private (AutoNAT: the bootstrap node's dial
	// back fails), becomes a DHT client and takes a relay slot.
	for _, h := range homes {
		waitRelayed(t, h.d, 90*time.Second)
	}
	private := time.Since(start)
	t.Logf("all three homes private, DHT clients, relayed: %s after start", private.Round(10*time.Millisecond))

	// The bootstrap node's health and metrics show the relay at work.
	var bh struct {
		Relay        string `json:"relay"`
		Reachability string `json:"reachability"`
		Peers        int    `json:"peers"`
	}
	if !boot.getJSON("/healthz", &bh) || bh.Relay != "on" || bh.Reachability != "public" || bh.Peers < 3 {
		t.Fatalf("bootstrap /healthz = %+v", bh)
	}
	if m := boot.metrics(t); !strings.Contains(m, `libp2p_relaysvc_reservations_total{type="opened"} 3`) {
		t.Fatalf("bootstrap /metrics has no 3 opened relay reservations:\n%s", grepLines(m, "libp2p_relaysvc"))
	}

	// An agent registered in home a is found by capability from b and c.
	reg := h(homes, "a").d.cli(t, "register", "-f", repoFile(t, "examples/agentspec.yaml"))
	if reg.code != 0 {
		t.Fatalf("register in home a: %+v", reg)
	}
	var idA struct {
		AgentID string `json:"agent_id"`
		PeerID  string `json:"peer_id"`
	}
	h(homes, "a").d.getJSON("/healthz", &idA)
	registered := time.Now()
	found, sources := map[string]time.Duration{}, map[string]string{}
	for _, name := range []string{"b", "c"} {
		home := h(homes, name)
		eventually(t, 60*time.Second, "discovery from home "+name, func() bool {
			r := home.d.cli(t, "discover", "--capability", "product.search", "--json")
			if r.code != 0 {
				return false
			}
			var out struct {
				Agents []struct {
					Agent struct {
						AgentID string `json:"agent_id"`
					} `json:"agent"`
					Source string `json:"source"`
				} `json:"agents"`
			}
			if json.Unmarshal([]byte(r.stdout), &out) != nil {
				return false
			}
			if len(out.Agents) == 1 && out.Agents[0].Agent.AgentID == idA.AgentID {
				sources[name] = out.Agents[0].Source
				return true
			}
			return false
		})
		found[name] = time.Since(registered)
		t.Logf("home %s found home a's agent %s after registration (source %s)", name, found[name].Round(10*time.Millisecond), sources[name])
	}

	// b and a are behind port-preserving NATs: DCUtR gives them a direct
	// connection. c is behind a symmetric NAT: the relay carries it.
	conn := func(home *natHome, peerID string) string {
		var out struct {
			Peers []struct {
				ID         string `json:"id"`
				Connection string `json:"connection"`
			} `json:"peers"`
		}
		if !home.d.getJSON("/peers", &out) {
			return ""
		}
		for _, p := range out.Peers {
			if p.ID == peerID {
				return p.Connection
			}
		}
		return "none"
	}
	eventually(t, 30*time.Second, "a direct connection between homes b and a", func() bool {
		return conn(h(homes, "b"), idA.PeerID) == "direct"
	})
	direct := time.Since(start)
	t.Logf("direct connection b–a %s after the daemons started", direct.Round(10*time.Millisecond))
	if got := conn(h(homes, "c"), idA.PeerID); got != "relayed" {
		t.Fatalf("home c's connection to home a is %q, want relayed (a symmetric NAT cannot be hole punched)", got)
	}
	// `agentd peers` shows it to the operator.
	r := h(homes, "c").d.cli(t, "peers")
	if r.code != 0 || !strings.Contains(r.stdout, "CONNECTION") || !strings.Contains(r.stdout, "relayed") {
		t.Fatalf("agentd peers in home c:\n%s%s", r.stdout, r.stderr)
	}
	r = h(homes, "b").d.cli(t, "peers")
	if r.code != 0 || !strings.Contains(r.stdout, "direct") {
		t.Fatalf("agentd peers in home b:\n%s%s", r.stdout, r.stderr)
	}
	// Home c has no gossip path to a (no direct connection, and GossipSub
	// does not open streams over relayed ones): its answer came from the
	// DHT, with a's record fetched over the relay and verified.
	if sources["c"] != "dht" {
		t.Fatalf("home c's answer came from %q, want dht (the record fetched over the relay)", sources["c"])
	}
	// The share of direct connections among the homes' connections to
	// each other: a–b direct, a–c and b–c relayed.
	ids := map[string]string{}
	for _, x := range homes {
		var hz struct {
			PeerID string `json:"peer_id"`
		}
		x.d.getJSON("/healthz", &hz)
		ids[x.name] = hz.PeerID
	}
	var pairs, directPairs int
	for i, x := range homes {
		for _, y := range homes[i+1:] {
			switch conn(x, ids[y.name]) {
			case "direct":
				pairs++
				directPairs++
			case "relayed":
				pairs++
			}
		}
	}
	t.Logf("FIGURES private_after=%s discover_b=%s discover_c=%s direct_b_a_after_start=%s direct_pairs=%d/%d",
		private.Round(10*time.Millisecond), found["b"].Round(10*time.Millisecond), found["c"].Round(10*time.Millisecond),
		direct.Round(10*time.Millisecond), directPairs, pairs)
}

func h(homes []*natHome, name string) *natHome {
	for _, x := range homes {
		if x.name == name {
			return x
		}
	}
	panic("no home " + name)
}

// nsHandle is a network namespace created by the test.
type nsHandle = testutil.Netns

// newNS creates a namespace with a short name (the veth names built from
// it must fit 15 bytes), or skips the test loudly.
func newNS(t *testing.T, role string) *nsHandle {
	t.Helper()
	name := fmt.Sprintf("ad%d%s", os.Getpid()%100000, role)
	if len(name) > 15 {
		name = name[:15]
	}
	return testutil.NewNetns(t, name, "the NAT test", true)
}

// sh runs each command line inside the namespace.
func sh(t *testing.T, ns *nsHandle, lines ...string) {
	t.Helper()
	for _, l := range lines {
		ns.Exec(t, strings.Fields(l)...)
	}
}

// nft loads a ruleset inside the namespace.
func nft(t *testing.T, ns *nsHandle, rules string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s\n%s", ns.Name, err, out, rules)
	}
}

func runOK(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// serveDNS answers TXT queries for name with dnsaddr= records of addrs,
// on natBootstrap:53 inside ns.
func serveDNS(t *testing.T, ns *nsHandle, name string, addrs []string) {
	t.Helper()
	var pc net.PacketConn
	if err := ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp4", natBootstrap+":53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.ServeDNS(t, pc, dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qu := range q.Question {
			if !strings.EqualFold(qu.Name, name) {
				m.Rcode = dns.RcodeNameError
				continue
			}
			if qu.Qtype != dns.TypeTXT {
				continue
			}
			for _, a := range addrs {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: qu.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"dnsaddr=" + a}})
			}
		}
		_ = w.WriteMsg(m)
	}))
}

// nsDaemon is an agentd process inside a namespace.
type nsDaemon struct {
	t      *testing.T
	name   string
	ns     *nsHandle
	api    string
	stdout *syncBuf
	out    *syncBuf
	client *http.Client
	done   chan struct{}
}

// startNSDaemon starts `agentd <cmd>` (run or bootstrap) inside ns with
// its own data directory, and waits for its HTTP address.
func startNSDaemon(t *testing.T, ns *nsHandle, name, dir, cmd string, args ...string) *nsDaemon {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "api.addr")
	full := []string{"netns", "exec", ns.Name, agentdBin, cmd, "--data-dir", filepath.Join(dir, "data"), "--log-level", "debug",
		"--api", "127.0.0.1:0", "--api-addr-file", addrFile, "--no-port-mapping"}
	full = append(full, args...)
	d := &nsDaemon{t: t, name: name, ns: ns, stdout: &syncBuf{}, out: &syncBuf{}, client: ns.HTTPClient(), done: make(chan struct{})}
	c := exec.Command("ip", full...)
	c.Stdout, c.Stderr = d.stdout, d.out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = c.Process.Signal(unix.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			_ = c.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			logTail(t, name, d.out.String())
		}
	})
	d.api = testutil.WaitAddrFile(t, 30*time.Second, name, addrFile, d.done, d.out.String)
	return d
}

// getJSON reads path from the daemon's API into v; false on any error.
func (d *nsDaemon) getJSON(path string, v any) bool {
	resp, err := d.client.Get("http://" + d.api + path)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// metrics reads the daemon's /metrics.
func (d *nsDaemon) metrics(t *testing.T) string {
	t.Helper()
	resp, err := d.client.Get("http://" + d.api + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", d.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// cli runs an agentd client command inside the namespace, against d.
func (d *nsDaemon) cli(t *testing.T, args ...string) result {
	t.Helper()
	return runAgentd(t, []string{"ip", "netns", "exec", d.ns.Name}, append(args, "--api", d.api)...)
}

// logTail logs the last lines of a daemon's log.
func logTail(t *testing.T, name, log string) {
	lines := strings.Split(log, "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	t.Logf("---- %s (last %d lines)\n%s", name, len(lines), strings.Join(lines, "\n"))
}

// manyBehindOneNAT is how many agentd share home a's public address in
// TestManyAgentsBehindOneNAT: more than the burst (10) of go-libp2p's
// identify-push limit per /24, so that the limit would show.
const manyBehindOneNAT = 12

// Issue 14 item 5: go-libp2p v0.51 rate-limits inbound identify pushes per
// remote /24 (IPv4) and /56 (IPv6) to 0.2/s with a burst of 10, loopback
// alone exempt. Agents behind one NAT share one address, and every one of
// them pushes when it turns private (its DHT protocol goes away) and when it
// gets its relay address. A push that is refused is not sent again, so the
// bootstrap node could keep an agent's addresses from before its relay
// reservation, and nobody outside its NAT could reach it. The test starts
// manyBehindOneNAT daemons behind one NAT at once, each with its own
// capability, and finds every one of them from a home behind a symmetric
// NAT, where only the relay can reach them.
func TestManyAgentsBehindOneNAT(t *testing.T) {
	a, c := &natHome{name: "a"}, &natHome{name: "c", symmetric: true}
	net := newNATNet(t, []*natHome{a, c})
	start := time.Now()
	n := manyBehindOneNAT
	if v, err := strconv.Atoi(os.Getenv("AGENTD_NAT_MANY")); err == nil && v > 0 {
		n = v
	}
	agents := make([]*nsDaemon, n)
	for i := range agents {
		agents[i] = net.startHomeDaemon(t, a, fmt.Sprintf("a%02d", i), 4777+i)
	}
	c.d = net.startHomeDaemon(t, c, "c", 4777)
	for _, d := range append(agents, c.d) {
		waitRelayed(t, d, 90*time.Second)
	}
	t.Logf("%d agents behind one NAT private and relayed %s after start", len(agents), time.Since(start).Round(10*time.Millisecond))
	// Every home agent is a DHT client now; the bootstrap node's routing
	// table must not hold any of them (it learns that from identify
	// pushes), or lookups would wait for peers nobody can dial.
	var bh struct {
		RT int `json:"dht_routing_table"`
	}
	if !net.boot.getJSON("/healthz", &bh) || bh.RT != 0 {
		t.Fatalf("the bootstrap node's routing table holds %d peers; every agent behind the NAT is a DHT client", bh.RT)
	}
	spec := filepath.Join(net.root, "spec-%02d.json")
	for i, d := range agents {
		f := fmt.Sprintf(spec, i)
		body := fmt.Sprintf(`{"agent_name":"shared-%02d","capabilities":{},"transport":{"type":"http","endpoint":"http://192.168.1.2:%d"},`+
			`"skills":[{"skill_id":"s-nat","version":"1.0.0","skill_type":"tool-skill","capabilities":[{"id":"nat.shared.%02d","version":"1.0.0"}]}]}`, i, 8000+i, i)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := d.cli(t, "register", "-f", f); r.code != 0 {
			t.Fatalf("register on %s: %+v", d.name, r)
		}
	}
	registered := time.Now()
	found := map[int]time.Duration{}
	deadline := time.Now().Add(60 * time.Second)
	for len(found) < len(agents) && time.Now().Before(deadline) {
		for i := range agents {
			if _, ok := found[i]; ok {
				continue
			}
			r := c.d.cli(t, "discover", "--capability", fmt.Sprintf("nat.shared.%02d", i), "--json")
			if r.code == 0 && strings.Contains(r.stdout, fmt.Sprintf(`shared-%02d`, i)) {
				found[i] = time.Since(registered)
			}
		}
	}
	var worst time.Duration
	var times []string
	for i := range agents {
		if d, ok := found[i]; ok {
			worst = max(worst, d)
			times = append(times, fmt.Sprintf("%s:%s", agents[i].name, d.Round(100*time.Millisecond)))
		}
	}
	t.Logf("found after registration: %s", strings.Join(times, " "))
	if os.Getenv("AGENTD_NAT_DEBUG") != "" {
		logTail(t, "c", c.d.out.String())
	}
	t.Logf("FIGURES behind_one_nat=%d found_from_symmetric_home=%d slowest=%s", len(agents), len(found), worst.Round(10*time.Millisecond))
	if len(found) != len(agents) {
		var missing []string
		for i := range agents {
			if _, ok := found[i]; !ok {
				missing = append(missing, agents[i].name)
			}
		}
		t.Fatalf("found %d of %d agents behind one NAT; missing %v", len(found), len(agents), missing)
	}
}
