package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/testnode"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

func startTestDaemon(t testing.TB, cfg api.Config) *testnode.Daemon {
	t.Helper()
	return testnode.Start(t, node.Config{}, cfg)
}

func seedPath(name string) string {
	return filepath.Join("..", "..", "record", "testdata", "seeds", name)
}

func TestClientCommands(t *testing.T) {
	d := startTestDaemon(t, api.Config{})
	apiFlag := []string{"--api", strings.TrimPrefix(d.URL, "http://")}
	// run puts --api right after the command (flags go before arguments).
	run := func(args ...string) result {
		n := 1
		if args[0] == "status" {
			n = 2
		}
		full := append(append(append([]string{}, args[:n]...), apiFlag...), args[n:]...)
		return runCLI(t, "", full...)
	}

	// register -f with an AgentSpec (seed 004).
	r := run("register", "-f", seedPath("004-product-search-agent.yaml"))
	if r.code != 0 || !strings.Contains(r.stdout, "registered "+d.ID.AgentID) || !strings.Contains(r.stdout, "product.search") {
		t.Fatalf("register: %+v", r)
	}
	// A seed-002 agent_card as JSON, with --json: the Announce echo.
	r = run("register", "--json", "-f", seedPath("002-agent-card.json"))
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if err := record.ValidateSchema(record.SchemaAnnounce, []byte(r.stdout)); err != nil {
		t.Fatalf("register --json: %v\n%s", err, r.stdout)
	}
	// A signed Announce goes as is (the agent's own key, this daemon's peer).
	own, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	a := &record.Agent{AgentID: uuid.NewString(), Capabilities: map[string]string{"signed-cap": "1.0"}, Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:7"}}
	a.Fill(a.AgentID, d.ID.PeerID.String(), own.PublicKeyPEM(), 5, time.Now(), time.Hour)
	sa, err := record.Sign(a, own.AgentKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	signedFile := filepath.Join(t.TempDir(), "signed.json")
	if err := os.WriteFile(signedFile, sa.MarshalAnnounce(), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run("register", "--json", "-f", signedFile)
	var echo record.Announce
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &echo) != nil || echo.Signature != sa.Announce().Signature {
		t.Fatalf("signed register: %+v", r)
	}
	// Standard input.
	r = runCLI(t, `{"capabilities":{"stdin-cap":""},"transport":{"type":"tcp","endpoint":""},"agent_id":"`+uuid.NewString()+`"}`, append([]string{"register", "-f", "-"}, apiFlag...)...)
	if r.code != 0 {
		t.Fatalf("stdin: %+v", r)
	}

	// discover: table and JSON.
	r = run("discover", "--capability", "product.search", "--version", ">=1.0.0")
	if r.code != 0 || !strings.Contains(r.stdout, "AGENT ID") || !strings.Contains(r.stdout, d.ID.AgentID) || !strings.Contains(r.stdout, "local") {
		t.Fatalf("discover: %+v", r)
	}
	r = run("discover", "--json", "--skill", "data-processor-agent", "--tag", "images", "--local")
	var out agentListJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Total != 1 || out.Agents[0].Agent.AgentID != record.ExternalAgentID("rtfs", "unique-agent-identifier-123") {
		t.Fatalf("discover --json: %+v", r)
	}
	r = run("discover", "--capability", "nothing-offers-this")
	if r.code != exitFailed || !strings.Contains(r.stderr, "no agent matches") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("no match: %+v", r)
	}
	if r = run("discover"); r.code != exitUsage {
		t.Fatalf("discover without filters: %+v", r)
	}
	if r = run("discover", "--capability", "x", "--limit", "0"); r.code != exitUsage {
		t.Fatalf("limit 0: %+v", r)
	}
	r = run("discover", "--version", "!!bad")
	if r.code != exitFailed || !strings.Contains(r.stderr, "version") {
		t.Fatalf("bad constraint: %+v", r)
	}

	// list and peers.
	r = run("list")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 5 {
		t.Fatalf("list (header and 4 agents): %+v", r)
	}
	r = run("list", "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Total != 4 {
		t.Fatalf("list --json: %+v", r)
	}
	if r = run("peers"); r.code != 0 || !strings.Contains(r.stdout, "no peers") {
		t.Fatalf("peers: %+v", r)
	}
	if r = run("peers", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"peers": []`) {
		t.Fatalf("peers --json: %+v", r)
	}

	// status set (the daemon's own agent by default).
	if r = run("status", "set", "degraded"); r.code != 0 || !strings.Contains(r.stdout, "DEGRADED") {
		t.Fatalf("status set: %+v", r)
	}
	if got, _ := d.Node.View().Get(d.ID.AgentID); got.Status != record.StatusDegraded {
		t.Fatalf("status %s", got.Status)
	}
	if r = run("status", "set", "sleepy"); r.code != exitUsage {
		t.Fatalf("bad status: %+v", r)
	}
	if r = run("status", "set", "--agent", uuid.NewString(), "HEALTHY"); r.code != exitFailed || !strings.Contains(r.stderr, "ErrNotFound") {
		t.Fatalf("status of an unknown agent: %+v", r)
	}

	// unregister (default the daemon's own agent), then again.
	if r = run("unregister", "--reason", "maintenance"); r.code != 0 || !strings.Contains(r.stdout, "unregistered "+d.ID.AgentID+" (MAINTENANCE)") {
		t.Fatalf("unregister: %+v", r)
	}
	if r = run("unregister", "--json", d.ID.AgentID); r.code != exitFailed || !strings.Contains(r.stderr, "ErrNotFound") {
		t.Fatalf("second unregister: %+v", r)
	}
	if r = run("unregister", "--reason", "bored"); r.code != exitUsage {
		t.Fatalf("bad reason: %+v", r)
	}
	if r = run("register"); r.code != exitUsage {
		t.Fatalf("register without --file: %+v", r)
	}
	r = run("register", "-f", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.code != exitFailed {
		t.Fatalf("missing file: %+v", r)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"capabilities":{},"transport":{"type":""}}`), 0o644)
	if r = run("register", "-f", bad); r.code != exitFailed || !strings.Contains(r.stderr, "transport.type") {
		t.Fatalf("invalid file: %+v", r)
	}
}

func TestClientCommandsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	for _, args := range [][]string{{"list"}, {"discover", "--capability", "x"}, {"peers"}, {"unregister"}, {"status", "set", "--api", addr, "HEALTHY"}, {"watch"}} {
		if args[0] != "status" {
			args = append(args, "--api", addr)
		}
		r := runCLI(t, "", args...)
		line := strings.TrimSpace(r.stderr)
		if r.code != exitFailed || strings.Contains(line, "\n") || !strings.Contains(line, addr) || !strings.Contains(line, "is `agentd run` running?") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// The address comes from the configuration when --api is not given.
	t.Setenv("AGENTD_API", addr)
	if r := runCLI(t, "", "list"); r.code != exitFailed || !strings.Contains(r.stderr, addr) {
		t.Fatalf("AGENTD_API: %+v", r)
	}
}

func TestClientCommandsToken(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-cli-test"
	d := startTestDaemon(t, api.Config{Addr: "192.0.2.5:4778", JWTSecret: secret})
	r := runCLI(t, "", "list", "--api", d.URL)
	if r.code != exitFailed || !strings.Contains(r.stderr, "ErrAuth") {
		t.Fatalf("without token: %+v", r)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": "discover:read"}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTD_TOKEN", tok)
	if r := runCLI(t, "", "list", "--api", d.URL); r.code != 0 {
		t.Fatalf("with AGENTD_TOKEN: %+v", r)
	}
	r = runCLI(t, "", "register", "-f", seedPath("004-product-search-agent.yaml"), "--api", d.URL)
	if r.code != exitFailed || !strings.Contains(r.stderr, "discover:write") {
		t.Fatalf("read-only token registering: %+v", r)
	}
}

// syncBuffer is a bytes.Buffer safe for the watch goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestClientWatchCommand(t *testing.T) {
	d := startTestDaemon(t, api.Config{})
	for _, asJSON := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr syncBuffer
		args := []string{"agentd", "watch", "--capability", "product.search", "--api", d.URL}
		if asJSON {
			args = append(args, "--json")
		}
		done := make(chan int, 1)
		go func() { done <- execute(ctx, args, strings.NewReader(""), &stdout, &stderr) }()
		// Register until the watch (which may still be connecting) sees
		// it. (Not through execute: urfave/cli apps share global flags, so
		// two cannot run at once.)
		spec, err := record.LoadAgentFile("a.yaml", mustRead(t, seedPath("004-product-search-agent.yaml")))
		if err != nil {
			t.Fatal(err)
		}
		waitForOutput(t, &stdout, "agent.registered", func() {
			_ = d.Node.Unregister(context.Background(), d.ID.AgentID, record.ReasonShutdown)
			cp := *spec
			if _, err := d.Node.Register(context.Background(), &cp); err != nil {
				t.Fatal(err)
			}
		})
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("watch exit %d: %s", code, stderr.String())
		}
		if asJSON {
			for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
				var ev map[string]any
				if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["event"] == nil {
					t.Fatalf("NDJSON line %q: %v", line, err)
				}
			}
		} else if !strings.Contains(stdout.String(), d.ID.AgentID) {
			t.Fatalf("watch output: %s", stdout.String())
		}
	}
}

// waitForOutput repeats act until out contains want or 10 s pass.
func waitForOutput(t *testing.T, out *syncBuffer, want string, act func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %q", want, out.String())
		}
		act()
	}
}

func TestDialableAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:4778":        "127.0.0.1:4778",
		"0.0.0.0:4778":          "127.0.0.1:4778",
		":4778":                 "127.0.0.1:4778",
		"[::]:4778":             "[::1]:4778",
		"http://0.0.0.0:9":      "http://127.0.0.1:9",
		"https://api.example:1": "https://api.example:1",
		"host":                  "host",
	} {
		if got := dialableAddr(in); got != want {
			t.Errorf("dialableAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
