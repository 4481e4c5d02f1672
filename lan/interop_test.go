package lan

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

// topo is a LAN of namespaces: a switch namespace with a bridge (multicast
// snooping off), and node namespaces each with eth0 on the bridge, an
// address 10.99.0.<i>/24 and a route for 224.0.0.0/4. Nothing of the host's
// network is touched.
type topo struct {
	sw    *netns
	nodes []*netns
}

func newTopo(t *testing.T, n int) *topo {
	t.Helper()
	sw := newNetns(t, "agentd-sw")
	sw.IP(t, "link", "add", "br0", "type", "bridge")
	sw.IP(t, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0")
	sw.IP(t, "link", "set", "br0", "up")
	tp := &topo{sw: sw}
	for i := 1; i <= n; i++ {
		ns := newNetns(t, fmt.Sprintf("agentd-n%d", i))
		port := fmt.Sprintf("port%d", i)
		sw.IP(t, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
		sw.IP(t, "link", "set", port, "master", "br0")
		sw.IP(t, "link", "set", port, "up")
		ns.IP(t, "link", "set", "lo", "up")
		ns.IP(t, "addr", "add", fmt.Sprintf("10.99.0.%d/24", i), "dev", "eth0")
		ns.IP(t, "link", "set", "eth0", "up", "multicast", "on")
		ns.IP(t, "route", "add", "224.0.0.0/4", "dev", "eth0")
		tp.nodes = append(tp.nodes, ns)
	}
	return tp
}

// Three processes in three namespaces on one bridge, started with no
// configuration, find each other's agents (UDP multicast and mDNS on real
// sockets, records fetched over libp2p); one finds another by capability
// through SKILL_DISCOVER; one that quits is forgotten by the others at once.
func TestProcessesInNamespaces(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, 3)
	var hs []*helper
	for i, ns := range tp.nodes {
		hs = append(hs, startHelper(t, ns, helperOpts{Name: fmt.Sprintf("agent%d", i+1), Skill: fmt.Sprintf("skill-%d", i+1),
			Caps: []string{fmt.Sprintf("cap-%d", i+1)}, UDP: true, MDNS: true}))
	}
	start := time.Now()
	for i, h := range hs {
		var others []string
		for j, o := range hs {
			if j != i {
				others = append(others, o.ready.AgentID)
			}
		}
		h.learnsAll(10*time.Second, others...)
	}
	t.Logf("mutual discovery of 3 processes: %s", time.Since(start).Round(time.Millisecond))

	hs[0].send(helperCmd{Cmd: "discover", Capability: "cap-3"})
	e := hs[0].wait("discovered", 5*time.Second, nil)
	if e.Err != "" || len(e.Agents) != 1 || e.Agents[0] != hs[2].ready.AgentID {
		t.Fatalf("discover cap-3 = %v %q", e.Agents, e.Err)
	}

	gone := time.Now()
	hs[2].send(helperCmd{Cmd: "quit"})
	for _, h := range hs[:2] {
		h.wait("forget", 3*time.Second, func(e helperEvent) bool { return e.AgentID == hs[2].ready.AgentID })
	}
	t.Logf("unregister seen by both others after %s", time.Since(gone).Round(time.Millisecond))
}

// avahi is an avahi-daemon with its own D-Bus system bus inside a
// namespace (and its own /run/avahi-daemon, in a private mount namespace,
// so that an Avahi of the host does not stop it).
type avahi struct {
	t   *testing.T
	ns  *netns
	env []string
}

// startAvahi starts dbus-daemon and avahi-daemon inside ns, or skips the
// test loudly when they cannot run here.
func startAvahi(t *testing.T, ns *netns, iface string) *avahi {
	t.Helper()
	for _, bin := range []string{"dbus-daemon", "avahi-daemon", "avahi-browse", "avahi-publish", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.SkipEnv(t, "SKIP (environment): %s is not installed (Debian: apt-get install avahi-daemon avahi-utils dbus); the Avahi interoperability test did not run", bin)
		}
	}
	dir := t.TempDir()
	bus := filepath.Join(dir, "bus")
	dbusConf := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=` + bus + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/><allow send_type="signal"/><allow send_type="method_return"/><allow send_type="error"/>
    <allow receive_type="method_call"/><allow receive_type="signal"/><allow receive_type="method_return"/><allow receive_type="error"/>
  </policy>
</busconfig>
`
	avahiConf := `[server]
use-ipv4=yes
use-ipv6=no
allow-interfaces=` + iface + `
enable-dbus=yes
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
`
	for name, body := range map[string]string{"dbus.conf": dbusConf, "avahi-daemon.conf": avahiConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	av := &avahi{t: t, ns: ns, env: append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS=unix:path="+bus)}
	dbusLog := av.daemon("dbus-daemon", "dbus-daemon", "--config-file="+filepath.Join(dir, "dbus.conf"), "--nofork", "--nopidfile")
	if !testutil.Within(10*time.Second, func() bool { _, err := os.Stat(bus); return err == nil }) {
		testutil.SkipEnv(t, "SKIP (environment): dbus-daemon did not create its socket within 10 s; the Avahi interoperability test did not run. Its output:\n%s", dbusLog())
	}
	script := "mkdir -p /run/avahi-daemon && mount -t tmpfs tmpfs /run/avahi-daemon && exec avahi-daemon -f " +
		filepath.Join(dir, "avahi-daemon.conf") + " --no-drop-root --no-chroot --no-rlimits --debug"
	avahiLog := av.daemon("avahi-daemon", "unshare", "-m", "sh", "-c", script)
	if !testutil.Within(15*time.Second, func() bool { return strings.Contains(avahiLog(), "Server startup complete") }) {
		testutil.SkipEnv(t, "SKIP (environment): avahi-daemon did not start within 15 s in namespace %s; the Avahi interoperability test did not run. Its output:\n%s", ns.Name, avahiLog())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("avahi-daemon output:\n%s", avahiLog())
		}
	})
	return av
}

// daemon starts a long-running command inside the namespace, stopped at
// the end of the test; the returned function reads its output so far.
func (av *avahi) daemon(name string, args ...string) func() string {
	t := av.t
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", av.ns.Name}, args...)...)
	cmd.Env = av.env
	var mu sync.Mutex
	var out bytes.Buffer
	w := lockedWriter{mu: &mu, w: &out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		testutil.SkipEnv(t, "SKIP (environment): cannot start %s: %v; the Avahi interoperability test did not run", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// browse runs avahi-browse -rtp for the service and returns its resolved
// ("=") lines.
func (av *avahi) browse(service string) []string {
	av.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", av.ns.Name, "avahi-browse", "-rtp", service)
	cmd.Env = av.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		av.t.Fatalf("avahi-browse: %v\n%s", err, out)
	}
	var res []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "=;") {
			res = append(res, line)
		}
	}
	return res
}

// publish runs avahi-publish -s until the returned function stops it.
func (av *avahi) publish(name, service string, port int, txt []string) (stop func()) {
	t := av.t
	t.Helper()
	args := append([]string{"netns", "exec", av.ns.Name, "avahi-publish", "-s", name, service, strconv.Itoa(port)}, txt...)
	cmd := exec.Command("ip", args...)
	cmd.Env = av.env
	var mu sync.Mutex
	var out bytes.Buffer
	w := lockedWriter{mu: &mu, w: &out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	if !testutil.Within(10*time.Second, func() bool { return strings.Contains(output(), "Established under name") }) {
		t.Fatalf("avahi-publish did not establish the service within 10 s:\n%s", output())
	}
	return stop
}

// Avahi interoperability, both ways: avahi-browse lists the service an
// agentd LAN publishes, with its TXT summary; a service published with
// avahi-publish carrying the signed record's TXT summary of an agentd
// peer (which advertises nothing itself) is discovered: the record is
// fetched from that peer and checked against the hash; when avahi-publish
// stops, Avahi's goodbye removes it.
func TestAvahiInterop(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, 2)
	av := startAvahi(t, tp.nodes[1], "eth0")
	a := startHelper(t, tp.nodes[0], helperOpts{Name: "alpha", Skill: "skill-a", Caps: []string{"cap-a"}, UDP: true, MDNS: true})
	b := startHelper(t, tp.nodes[1], helperOpts{Name: "beta", Skill: "skill-b", Caps: []string{"cap-b"}})

	// avahi-browse lists agentd's service.
	var line string
	deadline := time.Now().Add(15 * time.Second)
	for line == "" {
		for _, l := range av.browse("_agentsc._tcp") {
			if strings.Contains(l, ";"+a.ready.Instance+";") {
				line = l
			}
		}
		if line == "" && time.Now().After(deadline) {
			t.Fatalf("avahi-browse did not list %s", a.ready.Instance)
		}
	}
	t.Logf("avahi-browse: %s", line)
	f := strings.SplitN(line, ";", 10)
	if len(f) != 10 || f[7] != "10.99.0.1" || f[8] != "4777" || !strings.HasPrefix(f[6], "agentd-") {
		t.Fatalf("avahi-browse line %q: want address 10.99.0.1, port 4777, host agentd-*.local", line)
	}
	for _, want := range []string{`"id=` + a.ready.AgentID + `"`, `"h=` + a.ready.Hash + `"`, `"peer=` + a.ready.PeerID + `"`, `"txtvers=1"`, `"caps=cap-a"`} {
		if !strings.Contains(f[9], want) {
			t.Fatalf("avahi-browse TXT %s lacks %s", f[9], want)
		}
	}

	// Nothing announces b yet: a does not find it.
	a.send(helperCmd{Cmd: "discover", Capability: "cap-b"})
	if e := a.wait("discovered", 5*time.Second, nil); len(e.Agents) != 0 {
		t.Fatalf("a found %v before anything announced b", e.Agents)
	}
	// avahi-publish announces b's summary: a finds, fetches and verifies it.
	stop := av.publish("Beta via Avahi", "_agentsc._tcp", 4777, b.ready.TXT)
	a.wait("learn", 10*time.Second, func(e helperEvent) bool { return e.AgentID == b.ready.AgentID })
	// Avahi's goodbye when the publication ends removes it.
	stop()
	a.wait("forget", 5*time.Second, func(e helperEvent) bool { return e.AgentID == b.ready.AgentID })
}
