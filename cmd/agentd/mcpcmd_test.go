package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/mcpserver"
	"github.com/agentd/agentd/record"
)

// callTool calls a tool and decodes its structured output into out; it
// returns the result so the caller can check IsError.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exerciseTools runs every tool, with good and bad arguments, through an
// MCP client session, as an LLM agent would.
func exerciseTools(t *testing.T, s *mcp.ClientSession, updates <-chan string) {
	t.Helper()
	ctx := context.Background()
	lt, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s lacks an input schema, an output schema or a description", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"discover_agents", "explain_agent", "get_agent", "list_agents", "list_peers", "register_agent", "set_status", "unregister_agent"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	spec, err := os.ReadFile(seedPath("004-product-search-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reg mcpserver.RegisterOutput
	if res := callTool(t, s, "register_agent", map[string]any{"spec": string(spec)}, &reg); res.IsError {
		t.Fatalf("register_agent: %s", toolText(res))
	}
	if reg.AgentID == "" || !slices.Contains(reg.Capabilities, "product.search") || reg.Seq == 0 {
		t.Fatalf("%+v", reg)
	}
	rb, _ := json.Marshal(reg.Record)
	if _, _, err := record.ParseAnnounce(rb); err != nil {
		t.Fatalf("the hosted record does not parse: %v", err)
	}

	var found mcpserver.AgentsOutput
	if res := callTool(t, s, "discover_agents", map[string]any{"capability": "product.search", "version": ">=1.0.0"}, &found); res.IsError {
		t.Fatalf("discover_agents: %s", toolText(res))
	}
	if found.Total != 1 || found.Agents[0].AgentID != reg.AgentID || found.Agents[0].Source != "local" || !found.Agents[0].Signed ||
		found.Agents[0].Transport.Endpoint == "" || found.Agents[0].A2ACard["name"] != "product-search-agent" {
		t.Fatalf("%+v", found)
	}
	var one mcpserver.Agent
	if res := callTool(t, s, "get_agent", map[string]any{"agent_id": reg.AgentID}, &one); res.IsError || one.AgentID != reg.AgentID {
		t.Fatalf("get_agent: %s %+v", toolText(res), one)
	}
	// The record as a resource; a subscription to it hears the status change.
	uri := mcpserver.AgentURIPrefix + reg.AgentID
	rr, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, reg.AgentID) || rr.Contents[0].MIMEType != "application/json" {
		t.Fatalf("read %s: %v %+v", uri, err, rr)
	}
	if _, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.AgentURIPrefix + "2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c"}); err == nil {
		t.Fatal("read an unknown agent")
	}
	if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	var ok mcpserver.OKOutput
	if res := callTool(t, s, "set_status", map[string]any{"agent_id": reg.AgentID, "status": "DEGRADED"}, &ok); res.IsError {
		t.Fatalf("set_status: %s", toolText(res))
	}
	select {
	case got := <-updates:
		if got != uri {
			t.Fatalf("update of %s, want %s", got, uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no resources/updated notification after the status change")
	}
	if err := s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	var all mcpserver.AgentsOutput
	callTool(t, s, "list_agents", nil, &all)
	if all.Total != 1 || all.Agents[0].Status != "DEGRADED" {
		t.Fatalf("list_agents: %+v", all)
	}
	var peers mcpserver.PeersOutput
	if res := callTool(t, s, "list_peers", nil, &peers); res.IsError || peers.Peers == nil {
		t.Fatalf("list_peers: %s %+v", toolText(res), peers)
	}
	var ex mcpserver.ExplainOutput
	if res := callTool(t, s, "explain_agent", map[string]any{"agent_id": reg.AgentID}, &ex); res.IsError || ex.Verdict != "visible" || len(ex.Heard) == 0 {
		t.Fatalf("explain_agent: %s %+v", toolText(res), ex)
	}
	if res := callTool(t, s, "explain_agent", map[string]any{"capability": "product.search", "local_only": true}, &ex); res.IsError || ex.Verdict != "found" || len(ex.Steps) == 0 || len(ex.Found) != 1 {
		t.Fatalf("explain_agent of a capability: %s %+v", toolText(res), ex)
	}

	// Refusals are tool errors that start with the seed's error code.
	for _, c := range []struct {
		tool string
		args map[string]any
		code string
	}{
		{"discover_agents", map[string]any{"capability": "nobody.offers.this"}, record.CodeNoSkillsFound},
		{"discover_agents", map[string]any{"limit": 5000}, record.CodeMalformedPayload},
		{"discover_agents", map[string]any{"version": "not a range"}, record.CodeMalformedPayload},
		{"get_agent", map[string]any{"agent_id": "not-a-uuid"}, record.CodeMalformedPayload},
		{"explain_agent", map[string]any{}, record.CodeMalformedPayload},
		{"explain_agent", map[string]any{"agent_id": "not-a-uuid"}, record.CodeMalformedPayload},
		{"register_agent", map[string]any{"spec": "agent_type: x\n"}, record.CodeMalformedPayload},
		{"register_agent", map[string]any{"spec": ""}, record.CodeMalformedPayload},
		{"set_status", map[string]any{"agent_id": reg.AgentID, "status": "SLEEPY"}, record.CodeMalformedPayload},
		{"unregister_agent", map[string]any{"agent_id": reg.AgentID, "reason": "BORED"}, record.CodeMalformedPayload},
	} {
		res := callTool(t, s, c.tool, c.args, nil)
		if !res.IsError || !strings.HasPrefix(toolText(res), c.code) {
			t.Errorf("%s %v: error %v %q, want one starting with %s", c.tool, c.args, res.IsError, toolText(res), c.code)
		}
	}
	// Arguments of the wrong type do not reach the daemon.
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "discover_agents", Arguments: map[string]any{"limit": "many"}}); err == nil && !res.IsError {
		t.Error("a string limit was accepted")
	}

	if res := callTool(t, s, "unregister_agent", map[string]any{"agent_id": reg.AgentID, "reason": "MAINTENANCE"}, &ok); res.IsError {
		t.Fatalf("unregister_agent: %s", toolText(res))
	}
	callTool(t, s, "list_agents", nil, &all)
	if all.Total != 0 {
		t.Fatalf("still listed after unregister_agent: %+v", all)
	}
}

// newMCPClient is the go-sdk's client, sending the URI of every
// resources/updated notification to updates.
func newMCPClient(updates chan<- string) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case updates <- req.Params.URI:
			default:
			}
		},
	})
}

// The daemon's /mcp endpoint (streamable HTTP), with the go-sdk's client.
func TestMCPOverHTTP(t *testing.T) {
	d := startTestDaemon(t, api.Config{})
	updates := make(chan string, 16)
	c := newMCPClient(updates)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if init := s.InitializeResult(); init.ServerInfo.Name != mcpserver.Name {
		t.Fatalf("%+v", init.ServerInfo)
	}
	exerciseTools(t, s, updates)

	// register_agent takes an A2A Agent Card as it is; so does `agentd
	// register -f`.
	card := `{"name":"Currency Agent","url":"https://fx.example/a2a","version":"1.2.0","protocolVersion":"0.3.0",
		"capabilities":{},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],
		"skills":[{"id":"convert","name":"Convert","description":"Convert an amount","tags":["fx"]}]}`
	var reg mcpserver.RegisterOutput
	if res := callTool(t, s, "register_agent", map[string]any{"spec": card}, &reg); res.IsError || !slices.Contains(reg.Capabilities, "convert") {
		t.Fatalf("register_agent with an A2A card: %s %+v", toolText(res), reg)
	}
	f := t.TempDir() + "/card.json"
	if err := os.WriteFile(f, []byte(strings.Replace(card, "Currency Agent", "Rates Agent", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "register", "--api", strings.TrimPrefix(d.URL, "http://"), "-f", f); r.code != 0 || !strings.Contains(r.stdout, "rates-agent") {
		t.Fatalf("register -f card.json: %+v", r)
	}
}

// `agentd mcp` over stdio, talking to a running daemon.
func TestMCPOverStdio(t *testing.T) {
	d := startTestDaemon(t, api.Config{})
	inR, inW := io.Pipe()   // client → agentd mcp
	outR, outW := io.Pipe() // agentd mcp → client
	var stderr strings.Builder
	done := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- execute(ctx, []string{"agentd", "mcp", "--api", strings.TrimPrefix(d.URL, "http://")}, inR, outW, &stderr)
		_ = outW.Close()
	}()
	updates := make(chan string, 16)
	c := newMCPClient(updates)
	s, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exerciseTools(t, s, updates)
	_ = s.Close()
	_ = inW.Close()
	defer cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("agentd mcp exited %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentd mcp did not exit after its client closed")
	}
}

// /mcp follows the API's access rules: with authentication required a
// request without a token is refused before MCP starts, and a token's
// scopes limit the tools (a read token discovers but cannot register).
func TestMCPScopes(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	d := startTestDaemon(t, api.Config{JWTSecret: secret, RequireAuthOnLoopback: true})
	tok := func(scope string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": scope, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	connect := func(token string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: bearerTransport{token: token}}
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp", HTTPClient: hc}, nil)
	}
	if s, err := connect(""); err == nil {
		_ = s.Close()
		t.Fatal("an MCP session without a token")
	}
	s, err := connect(tok(api.ScopeRead))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var all mcpserver.AgentsOutput
	if res := callTool(t, s, "list_agents", nil, &all); res.IsError {
		t.Fatalf("list_agents with a read token: %s", toolText(res))
	}
	spec, err := os.ReadFile(seedPath("004-product-search-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res := callTool(t, s, "register_agent", map[string]any{"spec": string(spec)}, nil)
	if !res.IsError || !strings.HasPrefix(toolText(res), record.CodeForbidden) {
		t.Fatalf("register_agent with a read token: %v %q", res.IsError, toolText(res))
	}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// BenchmarkDiscoverSurfaces: one cached discover (the agent is in the live
// view) through REST (package client), MCP over the daemon's /mcp, and MCP
// over `agentd mcp` on stdio, against the same daemon in the same run.
func BenchmarkDiscoverSurfaces(b *testing.B) {
	d := startTestDaemon(b, api.Config{})
	cl, err := client.New(d.URL)
	if err != nil {
		b.Fatal(err)
	}
	spec, err := os.ReadFile(seedPath("004-product-search-agent.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	a, err := record.LoadAgentFile("a.yaml", spec)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cl.Register(context.Background(), a); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("rest", func(b *testing.B) {
		for b.Loop() {
			if rs, err := cl.Discover(ctx, client.Query{Capability: "product.search"}); err != nil || len(rs) != 1 {
				b.Fatal(err)
			}
		}
	})
	args := map[string]any{"capability": "product.search"}
	call := func(b *testing.B, s *mcp.ClientSession) {
		for b.Loop() {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "discover_agents", Arguments: args})
			if err != nil || res.IsError {
				b.Fatal(err)
			}
		}
	}
	b.Run("mcp-http", func(b *testing.B) {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		call(b, s)
	})
	b.Run("mcp-stdio", func(b *testing.B) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			execute(ctx, []string{"agentd", "mcp", "--api", strings.TrimPrefix(d.URL, "http://")}, inR, outW, io.Discard)
			_ = outW.Close()
		}()
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		s, err := c.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
		if err != nil {
			b.Fatal(err)
		}
		call(b, s)
		_ = s.Close()
		_ = inW.Close()
		<-done
	})
}
