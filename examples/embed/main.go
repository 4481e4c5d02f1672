// Command embed is a Go program that links agentd instead of running it
// beside itself: it starts the whole daemon in process (package daemon),
// registers its own agent, finds it again by capability through the local
// API (package client), and shuts the daemon down.
//
//	go run ./examples/embed -data-dir /tmp/embedded-agentd
//
// It serves the API on a loopback port of its own (or -api), without LAN
// discovery, bootstrap nodes or port mapping unless asked, so it runs
// anywhere; the network side is the same daemon `agentd run` starts.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/record"
)

func main() {
	dataDir := flag.String("data-dir", "", "data directory (identity, database); default a new temporary one")
	apiAddr := flag.String("api", "127.0.0.1:0", "address of the local API")
	lan := flag.Bool("lan", false, "discover agents on the LAN too")
	verbose := flag.Bool("v", false, "log the daemon's messages to standard error")
	flag.Parse()
	if err := run(*dataDir, *apiAddr, *lan, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(dataDir, apiAddr string, lan, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if dataDir == "" {
		d, err := os.MkdirTemp("", "embedded-agentd-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(d) }()
		dataDir = d
	}

	// The configuration `agentd run` would read, built in code.
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.API.Addr = apiAddr
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Discovery.UDP.Enabled, cfg.Discovery.MDNS.Enabled = lan, lan
	cfg.Discovery.DHT.BootstrapNodes = nil
	cfg.NAT.PortMapping = false
	if err := cfg.Validate(); err != nil {
		return err
	}
	opts := daemon.Options{Version: "embed-example"}
	if verbose {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}

	// One call starts everything agentd is; Close stops it.
	d, err := daemon.Start(ctx, cfg, opts)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close(context.Background()) }()
	fmt.Printf("agentd embedded: agent_id %s, API %s\n", d.Identity.AgentID, d.APIURL())

	// Register this program's agent with the node directly...
	a := &record.Agent{
		AgentName:   "embedded-translator",
		Description: "translates text; embeds agentd",
		Transport:   record.Transport{Type: "http", Endpoint: "http://127.0.0.1:9090/translate"},
		Skills: []record.Skill{{SkillID: "translate", Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: "text.translate"}}}},
	}
	sa, err := d.Node.Register(ctx, a)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	fmt.Printf("registered %s (%s)\n", sa.Agent.AgentID, sa.Agent.AgentName)

	// ...and find it again the way any other program would: the local API.
	cl, err := client.New(d.APIURL())
	if err != nil {
		return err
	}
	res, err := cl.Discover(ctx, client.Query{Capability: "text.translate"})
	if err != nil {
		return fmt.Errorf("discover: %w", err)
	}
	for _, r := range res {
		fmt.Printf("found %s at %s (source %s)\n", r.Agent.AgentID, r.Agent.Transport.Endpoint, r.Source)
	}
	return d.Close(context.Background())
}
