package lan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
)

// Integration tests with real agentd processes (cmd/agentd built into a
// temporary directory) in network namespaces: `agentd run` with no
// bootstrap flag, agents registered with `agentd register -f` and found
// with `agentd discover --capability --json`, as the README tour does.
// They fail, naming what is missing, if the binary lacks a command, the
// LAN transport or the API they drive.

const agentdAPI = "127.0.0.1:4778"

var (
	agentdOnce sync.Once
	agentdPath string
	agentdErr  error
)

// agentdBinary builds cmd/agentd once per test binary.
func agentdBinary(t *testing.T) string {
	t.Helper()
	agentdOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			agentdErr = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "agentd-lan-test-")
		if err != nil {
			agentdErr = err
			return
		}
		agentdPath = filepath.Join(dir, "agentd")
		out, err := exec.Command(goBin, "build", "-o", agentdPath, "../cmd/agentd").CombinedOutput()
		if err != nil {
			agentdErr = fmt.Errorf("go build ./cmd/agentd: %v\n%s", err, out)
		}
	})
	if agentdErr != nil {
		t.Fatalf("cannot build agentd: %v", agentdErr)
	}
	return agentdPath
}

// needCLI fails unless the agentd binary has the commands the tests drive.
func needCLI(t *testing.T, bin string) {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	var missing []string
	for _, c := range []string{"register", "discover"} {
		if !bytes.Contains(out, []byte("\n   "+c+" ")) && !bytes.Contains(out, []byte("\n   "+c+",")) {
			missing = append(missing, "agentd "+c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the agentd binary has no %s command", strings.Join(missing, " or "))
	}
}

type daemon struct {
	t    *testing.T
	bin  string
	ns   *netns
	dir  string
	http *http.Client
	cmd  *exec.Cmd
	done chan struct{}
	logs func() string
	// health is the last /healthz body.
	health map[string]any
}

// startAgentd runs `agentd run` inside ns with a fresh data directory and
// waits for /healthz.
func startAgentd(t *testing.T, bin string, ns *netns, args ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	full := append([]string{"netns", "exec", ns.Name, bin, "run", "--data-dir", dir, "--api", agentdAPI, "--log-level", "debug"}, args...)
	cmd := exec.Command("ip", full...)
	var mu sync.Mutex
	var out bytes.Buffer
	w := lockedWriter{mu: &mu, w: &out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, bin: bin, ns: ns, dir: dir, http: ns.HTTPClient(), cmd: cmd, done: make(chan struct{}),
		logs: func() string { mu.Lock(); defer mu.Unlock(); return out.String() }}
	go func() { _ = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("agentd in %s:\n%s", ns.Name, d.logs())
		}
	})
	eventually(t, 20*time.Second, "agentd in "+ns.Name+" to serve /healthz", func() bool {
		select {
		case <-d.done:
			t.Fatalf("agentd run exited in %s:\n%s", ns.Name, d.logs())
		default:
		}
		h, err := d.getJSON("/healthz")
		if err != nil {
			return false
		}
		d.health = h
		return true
	})
	return d
}

// stop sends SIGTERM (a clean shutdown) and waits.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	// ip netns exec execs agentd in place: the pid is agentd's.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *daemon) get(path string) ([]byte, int, error) {
	resp, err := d.http.Get("http://" + agentdAPI + path)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return b, resp.StatusCode, err
}

func (d *daemon) getJSON(path string) (map[string]any, error) {
	b, code, err := d.get(path)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func (d *daemon) agentID() string {
	id, _ := d.health["agent_id"].(string)
	return id
}

// needLAN fails unless /healthz reports the LAN transport up.
func (d *daemon) needLAN() {
	d.t.Helper()
	tr, _ := d.health["transports"].(map[string]any)
	lan, ok := tr["lan"].(string)
	if !ok {
		d.t.Fatalf("agentd run does not report the LAN transport in /healthz (transports.lan): %v", d.health)
	}
	if lan != "ok" {
		d.t.Fatalf("LAN discovery in %s is %q", d.ns.Name, lan)
	}
}

// cli runs an agentd command inside the daemon's namespace against its API.
func (d *daemon) cli(args ...string) (string, error) {
	full := append(append([]string{"netns", "exec", d.ns.Name, d.bin}, args...), "--api", agentdAPI)
	out, err := exec.Command("ip", full...).CombinedOutput()
	return string(out), err
}

// register registers an AgentSpec offering capability and returns the
// agent id the daemon reports.
func (d *daemon) register(name, capability string) {
	d.t.Helper()
	spec := fmt.Sprintf("agent_type: %s\nversion: \"1.0.0\"\ndescription: \"LAN integration test agent\"\nendpoint: http://127.0.0.1:8080\ncapabilities:\n  - name: %s\n    description: \"offered by %s\"\n", name, capability, name)
	f := filepath.Join(d.dir, name+".yaml")
	if err := os.WriteFile(f, []byte(spec), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if out, err := d.cli("register", "-f", f); err != nil {
		d.t.Fatalf("agentd register -f in %s: %v\n%s", d.ns.Name, err, out)
	}
}

// discovers polls `agentd discover --capability --json` until its output
// names agentID (want) or no longer does (!want).
func (d *daemon) discovers(capability, agentID string, want bool, within time.Duration) {
	d.t.Helper()
	var out string
	found := !want
	testutil.EventuallyEvery(d.t, within, 200*time.Millisecond, fmt.Sprintf("agentd discover --capability %s in %s to show agent %s: %v", capability, d.ns.Name, agentID, want), func() bool {
		var err error
		out, err = d.cli("discover", "--capability", capability, "--json")
		found = err == nil && strings.Contains(out, agentID)
		if found != want {
			d.t.Logf("discover output (found=%v):\n%s", found, out)
		}
		return found == want
	})
}

// Zero-configuration mutual discovery with real agentd processes: three
// daemons in three namespaces on one bridge, no bootstrap flag; each
// registers an agent and finds the other two by capability. Then one shuts
// down and the others see its SKILL_UNREGISTER at once.
func TestAgentdZeroConfig(t *testing.T) {
	t.Parallel()
	bin := agentdBinary(t)
	needCLI(t, bin)
	tp := newTopo(t, 3)
	var ds []*daemon
	for _, ns := range tp.nodes {
		d := startAgentd(t, bin, ns)
		d.needLAN()
		ds = append(ds, d)
	}
	for i, d := range ds {
		d.register(fmt.Sprintf("agent-%d", i+1), fmt.Sprintf("lan.cap%d", i+1))
	}
	start := time.Now()
	for i, d := range ds {
		for j, o := range ds {
			if i != j {
				d.discovers(fmt.Sprintf("lan.cap%d", j+1), o.agentID(), true, 10*time.Second)
			}
		}
	}
	t.Logf("3 agentd found each other's agents in %s", time.Since(start).Round(time.Millisecond))

	gone := ds[2].agentID()
	ds[2].stop()
	for _, d := range ds[:2] {
		d.discovers("lan.cap3", gone, false, 3*time.Second)
		eventually(t, 3*time.Second, fmt.Sprintf("agentd in %s to log the unregister of %s", d.ns.Name, gone), func() bool {
			return strings.Contains(d.logs(), `msg="agent unregistered on the LAN"`) && strings.Contains(d.logs(), "agent_id="+gone)
		})
	}
}

// Discovery by capability through SKILL_DISCOVER: a seed-001 client (a raw
// multicast socket in a third namespace) asks; the agentd hosting the
// capability answers with SKILL_DISCOVER_RESPONSE listing it, the other
// stays silent.
func TestAgentdAnswersSkillDiscover(t *testing.T) {
	t.Parallel()
	bin := agentdBinary(t)
	needCLI(t, bin)
	tp := newTopo(t, 3)
	a := startAgentd(t, bin, tp.nodes[0])
	a.needLAN()
	b := startAgentd(t, bin, tp.nodes[1])
	a.register("agent-a", "lan.alpha")
	b.register("agent-b", "lan.beta")
	s, err := nsNetwork{tp.nodes[2]}.ListenMulticast(netipGroup, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	q := fmt.Sprintf("SKILL_DISCOVER:seed001-client;lan.beta;;;%d", time.Now().UnixMilli())
	deadline := time.Now().Add(10 * time.Second)
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, readBufSize)
		for {
			n, src, _, err := s.ReadFrom(buf)
			if err != nil {
				close(got)
				return
			}
			if strings.HasPrefix(string(buf[:n]), "SKILL_DISCOVER_RESPONSE:seed001-client;") {
				got <- src.Addr().String() + " " + string(buf[:n])
			}
		}
	}()
	for {
		if err := s.Multicast([]byte(q), 0); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			src, text, _ := strings.Cut(r, " ")
			m, err := record.ParseSkillMessage(text)
			if err != nil {
				t.Fatalf("response does not parse: %v: %q", err, text)
			}
			if src != "10.99.0.2" || len(m.Skills) == 0 || !strings.Contains(text, "lan.beta") || strings.Contains(text, "lan.alpha") {
				t.Fatalf("response from %s: %q", src, text)
			}
			return
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatal("no SKILL_DISCOVER_RESPONSE within 10 s")
		}
	}
}

// Avahi interoperability with real agentd processes: avahi-browse lists
// the service of an agentd, and a service published with avahi-publish
// carrying the TXT summary of a record served by an agentd that advertises
// nothing itself (--no-lan) is discovered by the other agentd.
func TestAgentdAvahi(t *testing.T) {
	t.Parallel()
	bin := agentdBinary(t)
	needCLI(t, bin)
	tp := newTopo(t, 2)
	a := startAgentd(t, bin, tp.nodes[0])
	a.needLAN()
	av := startAvahi(t, tp.nodes[1], "eth0")
	b := startAgentd(t, bin, tp.nodes[1], "--no-lan")
	a.register("agent-a", "lan.alpha")
	b.register("agent-b", "lan.beta")

	deadline := time.Now().Add(15 * time.Second)
	for {
		found := false
		for _, l := range av.browse("_agentsc._tcp") {
			if strings.Contains(l, `"id=`+a.agentID()+`"`) && strings.Contains(l, ";10.99.0.1;") {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("avahi-browse did not list agent %s", a.agentID())
		}
	}

	a.discovers("lan.beta", b.agentID(), false, 0)
	body, code, err := b.get("/agents/" + b.agentID())
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /agents/%s answered %d %v: %s", b.agentID(), code, err, body)
	}
	sa, _, err := record.ParseResponse(body)
	if err != nil {
		t.Fatalf("GET /agents/%s is not a seed-000 Response: %v: %s", b.agentID(), err, body)
	}
	txt, err := SummaryOf(sa).TXT()
	if err != nil {
		t.Fatal(err)
	}
	stop := av.publish("agent-b via Avahi", "_agentsc._tcp", 4777, txt)
	a.discovers("lan.beta", b.agentID(), true, 10*time.Second)
	stop()
	eventually(t, 5*time.Second, "agentd to honour Avahi's goodbye", func() bool {
		return strings.Contains(a.logs(), `msg="agent left the LAN (mDNS goodbye)"`)
	})
}

var netipGroup = netip.MustParseAddrPort("224.0.0.1:54321")
