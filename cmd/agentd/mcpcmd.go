package main

import (
	"context"
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/mcpserver"
)

// mcpCommand is `agentd mcp`: the MCP server over stdio, for an LLM agent
// or an MCP client on this machine. It talks to the running daemon through
// the local API, as the other client commands do.
func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve agentd's MCP tools over stdio (for an MCP client such as an LLM agent)",
		Description: "Speaks the Model Context Protocol on standard input and output: an MCP client\n" +
			"starts `agentd mcp` and calls its tools (discover_agents, get_agent, list_agents,\n" +
			"register_agent, unregister_agent, set_status, list_peers), each one call of the\n" +
			"running daemon's API. The daemon serves the same tools at /mcp (streamable HTTP).\n" +
			"docs/mcp.md has the client configuration for both. Nothing but the protocol is\n" +
			"written to standard output; errors go to standard error. " + clientAPIHelp,
		Flags: daemonClientFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("mcp takes no arguments")
			}
			cl, err := daemonClient(c)
			if err != nil {
				return err
			}
			watch := func(ctx context.Context, ready func(), event func(agentID string)) error {
				ch, err := cl.Watch(ctx, client.WatchFilter{})
				if err != nil {
					return err
				}
				ready() // Watch returns once the daemon's stream is open
				for ev := range ch {
					if ev.AgentID != "" {
						event(ev.AgentID)
					}
				}
				return nil
			}
			srv := mcpserver.New(buildVersion().Version, func(*mcp.RequestExtra) (mcpserver.Backend, error) { return cl, nil }, watch)
			defer srv.Close()
			srv.StartWatch()
			err = srv.Run(c.Context, &mcp.IOTransport{Reader: readCloser{c.App.Reader}, Writer: writeCloser{c.App.Writer}})
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				return nil // the client went away, or a signal: a normal end
			}
			return err
		},
	}
}

// readCloser and writeCloser give the app's streams the Close the MCP
// transport wants; closing them is the process's business, not the
// transport's.
type readCloser struct{ io.Reader }

func (readCloser) Close() error { return nil }

type writeCloser struct{ io.Writer }

func (writeCloser) Close() error { return nil }
