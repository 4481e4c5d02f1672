package daemon_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
)

func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.API.Addr = "127.0.0.1:0"
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Discovery.UDP.Enabled, cfg.Discovery.MDNS.Enabled = false, false
	cfg.Discovery.DHT.BootstrapNodes = nil
	cfg.NAT.PortMapping = false
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// One call starts the whole daemon; its API answers; Close stops it, is
// idempotent, and a second daemon can then open the same data directory
// (the store was released).
func TestStartServeClose(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	d, err := daemon.Start(ctx, cfg, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(d.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	h, err := cl.Health(ctx)
	if err != nil || h.AgentID != d.Identity.AgentID {
		t.Fatalf("health: %v %+v", err, h)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := cl.Health(ctx); err == nil {
		t.Fatal("the API still answers after Close")
	}
	d2, err := daemon.Start(ctx, cfg, daemon.Options{})
	if err != nil {
		t.Fatalf("restart on the same data directory: %v", err)
	}
	if d2.Identity.AgentID != d.Identity.AgentID {
		t.Fatal("the identity changed across a restart")
	}
	if err := d2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A start that fails (the API address is taken) closes what it opened:
// the data directory can be opened again at once.
func TestStartFailureReleases(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	d, err := daemon.Start(ctx, cfg, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close(ctx) }()
	other := testConfig(t)
	other.API.Addr = d.APIAddr()
	if _, err := daemon.Start(ctx, other, daemon.Options{}); err == nil {
		t.Fatal("started on an API address in use")
	}
	again, err := daemon.Start(ctx, func() config.Config { c := other; c.API.Addr = "127.0.0.1:0"; return c }(), daemon.Options{})
	if err != nil {
		t.Fatalf("the failed start did not release its data directory: %v", err)
	}
	_ = again.Close(ctx)
}

// examples/embed, the program that embeds agentd, builds and runs: it
// starts the daemon, registers its agent and finds it through the API.
func TestEmbedExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "embed")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	build := exec.Command("go", "build", "-o", bin, "../examples/embed")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/embed: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/embed: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`registered ([0-9a-f-]{36}) \(embedded-translator\)`).FindSubmatch(out)
	if m == nil || !regexp.MustCompile(`found `+string(m[1])+` at http://127.0.0.1:9090/translate \(source local\)`).Match(out) {
		t.Fatalf("examples/embed printed:\n%s", out)
	}
}

// An MCP session that its client never ends does not outlive the daemon
// (goleak checks at the end of the package's tests).
func TestCloseEndsMCPSessions(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	d, err := daemon.Start(ctx, cfg, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.APIURL() + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "list_agents"}); err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// Run calls Options.Serving once the API answers, and returns nil when its
// context ends.
func TestRunCallsServingOnce(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan string, 2)
	file := filepath.Join(t.TempDir(), "api.addr")
	errc := make(chan error, 1)
	go func() {
		errc <- daemon.Run(ctx, cfg, daemon.Options{APIAddrFile: file, Serving: func() {
			b, err := os.ReadFile(file) // written once the API serves
			if err != nil {
				served <- "no address file: " + err.Error()
				return
			}
			served <- strings.TrimSpace(string(b))
		}})
	}()
	var addr string
	select {
	case addr = <-served:
	case err := <-errc:
		t.Fatalf("Run returned before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serving was not called")
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("Serving called before the API answers (%q): %v", addr, err)
	}
	_ = resp.Body.Close()
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(served) != 0 {
		t.Fatal("Serving called twice")
	}
}

// TestNodeConfigQuietHeartbeats: discovery.healthCheck.gossipBeatEvery
// reaches the node, 3 by default.
func TestNodeConfigQuietHeartbeats(t *testing.T) {
	for _, n := range []int{config.DefaultGossipBeatEvery, 1} {
		cfg := config.Default()
		if n != config.DefaultGossipBeatEvery {
			cfg.Discovery.HealthCheck.GossipBeatEvery = n
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		nc, err := daemon.NodeConfig(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if nc.GossipBeatEvery != n {
			t.Errorf("node's GossipBeatEvery %d, want %d", nc.GossipBeatEvery, n)
		}
	}
}
