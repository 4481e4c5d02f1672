package lan

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The helper process: the test binary re-executed inside a network
// namespace (TestMain runs helperMain when helperEnv is set). It is a
// minimal daemon around package lan on real sockets: a libp2p host on TCP
// 4777, the DHT's record protocol to serve and fetch records, one hosted
// agent, and JSON lines on stdout for what the LAN reports. Commands come
// as JSON lines on stdin.

const helperEnv = "AGENTD_LAN_HELPER"

type helperOpts struct {
	Name   string   `json:"name"`
	Skill  string   `json:"skill"`
	Caps   []string `json:"caps"`
	UDP    bool     `json:"udp"`
	MDNS   bool     `json:"mdns"`
	Iface  string   `json:"iface"`
	Listen string   `json:"listen"`
}

type helperEvent struct {
	Event    string   `json:"event"`
	AgentID  string   `json:"agent_id,omitempty"`
	PeerID   string   `json:"peer_id,omitempty"`
	Hash     string   `json:"hash,omitempty"`
	Seq      uint64   `json:"seq,omitempty"`
	TXT      []string `json:"txt,omitempty"`
	Instance string   `json:"instance,omitempty"`
	Caps     []string `json:"caps,omitempty"`
	Agents   []string `json:"agents,omitempty"`
	OK       bool     `json:"ok,omitempty"`
	Why      string   `json:"why,omitempty"`
	Err      string   `json:"err,omitempty"`
}

type helperCmd struct {
	Cmd        string `json:"cmd"`
	Capability string `json:"capability,omitempty"`
}

type hostedOne struct {
	id *trust.Identity
	sa *record.SignedAgent
}

func (h hostedOne) HostedRecords(q dht.FetchQuery) []*record.SignedAgent {
	if q.Matches(&h.sa.Agent) {
		return []*record.SignedAgent{h.sa}
	}
	return nil
}

func (h hostedOne) SignChallenge(agentID string, msg []byte) ([]byte, bool, error) {
	if agentID != h.sa.Agent.AgentID {
		return nil, false, nil
	}
	sig, err := record.SignBytes(h.id.AgentKey, msg)
	return sig, err == nil, err
}

// helperMain runs the helper until "quit" or the end of stdin; it returns
// the exit code.
func helperMain() int {
	var o helperOpts
	if err := json.Unmarshal([]byte(os.Getenv(helperEnv)), &o); err != nil {
		fmt.Fprintln(os.Stderr, "helper options:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(e helperEvent) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(e)
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "helper: %s: %v\n", what, err)
		return 1
	}
	id, err := trust.Generate()
	if err != nil {
		return fail("identity", err)
	}
	ver, err := trust.NewVerifier(trust.Config{}, nil)
	if err != nil {
		return fail("verifier", err)
	}
	sk := record.Skill{SkillID: o.Skill, Version: "1.0.0", SkillType: record.SkillTool, Endpoint: "127.0.0.1:8080"}
	for _, c := range o.Caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	a := &record.Agent{AgentName: o.Name, Transport: record.Transport{Type: "tcp", Endpoint: "127.0.0.1:9000"}, Skills: []record.Skill{sk}}
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), 1, time.Now(), time.Hour)
	sa, err := id.Sign(a)
	if err != nil {
		return fail("sign", err)
	}
	h, err := p2p.New(p2p.Config{Key: id.PeerKey, Listen: []string{o.Listen}, DisableMetrics: true})
	if err != nil {
		return fail("host", err)
	}
	defer func() { _ = h.Close() }()
	d, err := dht.New(h, dht.Config{}, ver, hostedOne{id, sa}, nil, log)
	if err != nil {
		return fail("dht", err)
	}
	if err := d.Start(context.Background()); err != nil {
		return fail("dht start", err)
	}
	defer func() { _ = d.Close() }()
	cfg := FromConfig(config.Default().Discovery)
	cfg.UDP.Enabled, cfg.MDNS.Enabled, cfg.Interface = o.UDP, o.MDNS, o.Iface
	l, err := New(cfg, Deps{
		Host: h, Identity: id, Verifier: ver, Logger: log,
		Locals: func() []*record.SignedAgent { return []*record.SignedAgent{sa} },
		Learn: func(x *record.SignedAgent) {
			emit(helperEvent{Event: "learn", AgentID: x.Agent.AgentID, Seq: x.Agent.Seq, Caps: x.Agent.AllCapabilities()})
		},
		Forget: func(agentID string) { emit(helperEvent{Event: "forget", AgentID: agentID}) },
		Fetch: func(ctx context.Context, p peer.AddrInfo, agentID string) ([]*record.SignedAgent, error) {
			return d.Fetch(ctx, p, dht.FetchQuery{AgentID: agentID})
		},
	})
	if err != nil {
		return fail("lan", err)
	}
	if err := l.Start(context.Background()); err != nil {
		return fail("lan start", err)
	}
	txt, _ := SummaryOf(sa).TXT()
	hash := sa.Hash()
	emit(helperEvent{Event: "ready", AgentID: id.AgentID, PeerID: id.PeerID.String(),
		Hash: base64.RawURLEncoding.EncodeToString(hash[:]), TXT: txt, Instance: instanceLabel(&sa.Agent)})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c helperCmd
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			emit(helperEvent{Event: "error", Err: err.Error()})
			continue
		}
		switch c.Cmd {
		case "discover":
			signed, foreign, err := l.Discover(context.Background(), store.Filter{Capability: c.Capability})
			e := helperEvent{Event: "discovered"}
			for _, x := range signed {
				e.Agents = append(e.Agents, x.Agent.AgentID)
			}
			for _, x := range foreign {
				e.Agents = append(e.Agents, x.AgentID)
			}
			if err != nil {
				e.Err = err.Error()
			}
			emit(e)
		case "available":
			ok, why := l.Available()
			emit(helperEvent{Event: "available", OK: ok, Why: why})
		case "quit":
			_ = l.Close()
			emit(helperEvent{Event: "closed"})
			return 0
		}
	}
	_ = l.Close()
	return 0
}

// helper is a running helper process, seen from the test.
type helper struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan helperEvent
	done   chan struct{}
	ready  helperEvent
}

// startHelper runs a helper inside ns and waits for it to be ready.
func startHelper(t *testing.T, ns *netns, o helperOpts) *helper {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "/ip4/0.0.0.0/tcp/4777"
	}
	opts, _ := json.Marshal(o)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.Name, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(opts))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hp := &helper{t: t, name: o.Name, cmd: cmd, stdin: stdin, events: make(chan helperEvent, 256), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e helperEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			select {
			case hp.events <- e:
			default:
			}
		}
	}()
	var logMu sync.Mutex
	var logs []string
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logMu.Lock()
			logs = append(logs, sc.Text())
			logMu.Unlock()
		}
	}()
	go func() {
		wg.Wait()
		_ = cmd.Wait()
		close(hp.done)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-hp.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-hp.done
		}
		if t.Failed() || testing.Verbose() {
			logMu.Lock()
			for _, line := range logs {
				t.Logf("[%s] %s", o.Name, line)
			}
			logMu.Unlock()
		}
	})
	hp.ready = hp.wait("ready", 15*time.Second, nil)
	return hp
}

// wait returns the next event of kind ev that match accepts (any when nil).
func (hp *helper) wait(ev string, d time.Duration, match func(helperEvent) bool) helperEvent {
	hp.t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case e := <-hp.events:
			if e.Event == ev && (match == nil || match(e)) {
				return e
			}
		case <-hp.done:
			hp.t.Fatalf("helper %s exited while waiting for %q", hp.name, ev)
		case <-tm.C:
			hp.t.Fatalf("helper %s: no %q event within %s", hp.name, ev, d)
		}
	}
}

func (hp *helper) send(c helperCmd) {
	hp.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := hp.stdin.Write(append(b, '\n')); err != nil {
		hp.t.Fatalf("helper %s: %v", hp.name, err)
	}
}

// learnsAll waits until the helper has learnt every agent id.
func (hp *helper) learnsAll(d time.Duration, ids ...string) {
	hp.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(d)
	for len(want) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			hp.t.Fatalf("helper %s did not learn %s within %s", hp.name, strings.Join(keys(want), ", "), d)
		}
		e := hp.wait("learn", left, nil)
		delete(want, e.AgentID)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
