package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/mcpserver"
	"github.com/agentd/agentd/view"
)

// The MCP surface: the streamable HTTP transport of package mcpserver at
// /mcp. Its tools call this API in process (no socket), as the CLI calls
// it over one, with the Authorization header of the MCP request: what a
// token may do through MCP is exactly what it may do through REST.

const surfaceMCP = "mcp"

// mcpHandler builds the /mcp handler. The MCP session lives as long as
// its client keeps it (idle sessions close after mcpSessionIdle).
func (s *Server) mcpHandler() http.Handler {
	inproc := &http.Client{Transport: inProcess{h: s.handler}}
	base := "http://" + s.inProcessHost()
	backend := func(extra *mcp.RequestExtra) (mcpserver.Backend, error) {
		opts := []client.Option{client.WithHTTPClient(inproc)}
		if h := extra; h != nil && h.Header != nil {
			if tok, ok := strings.CutPrefix(h.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
				opts = append(opts, client.WithToken(tok))
			}
		}
		return client.New(base, opts...)
	}
	srv := mcpserver.New(s.cfg.Version, backend, s.watchEvents)
	s.mcp = srv
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server }, &mcp.StreamableHTTPOptions{
		SessionTimeout: mcpSessionIdle,
		JSONResponse:   true,
		Logger:         s.log.With("surface", surfaceMCP),
		// The API's own guard (serveHTTP) already refuses a Host that is
		// not loopback on a loopback API; the SDK's check would refuse the
		// in-process clients of tests that use other names.
		DisableLocalhostProtection: true,
	})
	// A request (a server-to-client stream above all) ends when the API
	// closes, not only when its client goes: Close must not wait for it.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// closeMCP ends every MCP session and the watch behind the resource
// subscriptions (Close).
func (s *Server) closeMCP() {
	if s.mcp == nil {
		return
	}
	for ss := range s.mcp.Sessions() {
		_ = ss.Close()
	}
	s.mcp.Close()
}

// watchEvents feeds the MCP resource subscriptions from the live view's
// registry events (the WebSocket watch's source) until ctx ends.
func (s *Server) watchEvents(ctx context.Context, ready func(), event func(agentID string)) error {
	sub := s.n.View().Subscribe(view.Filter{}, 256)
	defer sub.Close()
	ready()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.C():
			if !ok {
				return sub.Err()
			}
			if ev.AgentID != "" {
				event(ev.AgentID)
			}
		}
	}
}

// inProcessHost is the Host of in-process requests: the API's address,
// or a loopback name (the rebinding guard accepts it) when it has none.
func (s *Server) inProcessHost() string {
	if s.cfg.Addr != "" {
		return s.cfg.Addr
	}
	return "127.0.0.1"
}

// inProcess is an http.RoundTripper that serves a request with a handler
// in this process.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	r.RemoteAddr = "127.0.0.1:0"
	if r.Body == nil {
		r.Body = http.NoBody
	}
	t.h.ServeHTTP(w, r)
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(bytes.NewReader(w.body.Bytes())), ContentLength: int64(w.body.Len()), Request: r,
	}, nil
}

// bufferedResponse is the ResponseWriter of an in-process request.
type bufferedResponse struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

// mcpSessionIdle closes an MCP session its client left without a DELETE.
const mcpSessionIdle = 30 * time.Minute
