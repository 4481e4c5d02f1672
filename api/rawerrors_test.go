package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Requests net/http refuses before any handler runs get the API's JSON
// error body, not net/http's text/plain (issue 12 item 6), and the daemon
// keeps serving.
func TestRawHTTPErrorsAreJSON(t *testing.T) {
	n := newNode(t, nodeOpts{})
	s, err := New(n.Node, Config{Version: "test"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Listener = JSONErrorListener(srv.Listener)
	srv.Config.MaxHeaderBytes = 16 << 10
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	big := strings.Repeat("x", 64<<10)
	cases := []struct {
		name, req string
		status    int
		code      string
	}{
		{"garbage request line", "GARBAGE\r\n\r\n", 400, "ErrMalformedPayload"},
		{"no method", " / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "ErrMalformedPayload"},
		{"bad version", "GET / HTTP/x\r\nHost: x\r\n\r\n", 400, "ErrMalformedPayload"},
		{"unsupported version", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "ErrMalformedPayload"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "ErrMalformedPayload"},
		{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "ErrMalformedPayload"},
		{"bad Host", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "ErrMalformedPayload"},
		{"header without colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nBroken\r\n\r\n", 400, "ErrMalformedPayload"},
		{"space in header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400, "ErrMalformedPayload"},
		{"control char in header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400, "ErrMalformedPayload"},
		{"continuation line", "GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "ErrMalformedPayload"},
		{"headers too large", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431, "ErrRequestTooLarge"},
		{"bad Content-Length", "POST /agents HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "ErrMalformedPayload"},
		{"negative Content-Length", "POST /agents HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "ErrMalformedPayload"},
		{"two Content-Lengths", "POST /agents HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "ErrMalformedPayload"},
		{"unknown Transfer-Encoding", "POST /agents HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "ErrMalformedPayload"},
		{"chunked and identity", "POST /agents HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501, "ErrMalformedPayload"},
		{"bad URI", "GET %zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "ErrMalformedPayload"},
		{"bad chunk", "POST /agents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400, "ErrMalformedPayload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, c.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q: %s", ct, body)
			}
			var e struct{ Error, Message string }
			if err := json.Unmarshal(body, &e); err != nil || e.Error != c.code || e.Message == "" {
				t.Errorf("body %s (%v), want error %s", body, err, c.code)
			}
		})
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("still serving: %v", err)
	}
	_ = resp.Body.Close()
}

func TestRewriteRawErrorLeavesHandlerAnswersAlone(t *testing.T) {
	for _, p := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nok",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nDate: x\r\n\r\n{}",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n\r\nx",
		"hello",
	} {
		if _, ok := rewriteRawError([]byte(p)); ok {
			t.Errorf("rewrote %q", p)
		}
	}
}

// A client that half-closes its socket after sending still gets its answer
// (issue 12 item 6: it got 503 "not serving: context canceled").
func TestHalfClosedClientGetsItsAnswer(t *testing.T) {
	a := newAPI(t, Config{})
	addr := strings.TrimPrefix(a.url, "http://")
	for _, req := range []string{
		"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		"GET /agents?capability=cap.none HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n%.0d%s",
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"discover","params":{"capability":"cap.none"}}`
		if strings.HasPrefix(req, "GET") {
			body = ""
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(conn, req, len(body), body); err != nil {
			t.Fatal(err)
		}
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode == http.StatusServiceUnavailable || strings.Contains(string(b), "not serving") {
			t.Errorf("%.20s…: %d %s", req, resp.StatusCode, b)
		}
	}
}

// The mechanism behind the half-close answer, deterministically: net/http
// has already cancelled the request's context (it read EOF) when the
// handler runs; a bounded route still gets a live context with its own
// deadline.
func TestBoundedRouteOutlivesConnectionCancel(t *testing.T) {
	a := newAPI(t, Config{RequestTimeout: time.Minute})
	var sawErr error
	var sawDeadline bool
	h := a.s.wrap(routeOpts{surface: surfaceREST, scope: scopeOpen}, func(w http.ResponseWriter, r *http.Request) error {
		sawErr = r.Context().Err()
		_, sawDeadline = r.Context().Deadline()
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("GET", "/agents", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if sawErr != nil || !sawDeadline || rec.Code != http.StatusNoContent {
		t.Fatalf("handler saw ctx err %v, deadline %v; answered %d", sawErr, sawDeadline, rec.Code)
	}
}
