package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/agentd/agentd/record"
)

// net/http answers a request it cannot parse — a malformed request line, a
// bad header, a missing Host, headers over MaxHeaderBytes, a bad
// Content-Length or Transfer-Encoding — itself, before any handler runs,
// with a plain-text body. It writes that answer with one Write straight to
// the connection, as "HTTP/1.1 <code> <text>" followed by exactly
// rawErrorHeaders. JSONErrorListener wraps the API's listener and turns each
// such answer into the API's JSON error body (ErrMalformedPayload, or
// ErrRequestTooLarge for 431), so every client sees one error format.
//
// What cannot be reached this way: a connection net/http closes without
// answering (a client that sends nothing, or hangs up: it gets nothing), and
// a TLS handshake on the plain port (net/http answers "HTTP/1.0 400" for
// it; the rewrite covers that status line as well).
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// JSONErrorListener wraps ln so that net/http's own plain-text error answers
// carry the API's JSON error body instead.
func JSONErrorListener(ln net.Listener) net.Listener { return jsonErrListener{ln} }

type jsonErrListener struct{ net.Listener }

func (l jsonErrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrConn{Conn: c}, nil
}

type jsonErrConn struct{ net.Conn }

func (c *jsonErrConn) Write(p []byte) (int, error) {
	if out, ok := rewriteRawError(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rewriteRawError recognises one of net/http's plain-text error answers and
// returns the JSON answer to send instead.
func rewriteRawError(p []byte) ([]byte, bool) {
	var proto string
	switch {
	case bytes.HasPrefix(p, []byte("HTTP/1.1 ")):
		proto = "HTTP/1.1"
	case bytes.HasPrefix(p, []byte("HTTP/1.0 ")):
		proto = "HTTP/1.0"
	default:
		return nil, false
	}
	// The status line must run straight into rawErrorHeaders: a handler's
	// answer goes through the response writer, which always adds Date and
	// Content-Length, so it never has that shape.
	eol := bytes.Index(p, []byte("\r\n"))
	if eol < 0 || !bytes.HasPrefix(p[eol:], []byte(rawErrorHeaders)) {
		return nil, false
	}
	line := string(p[len(proto)+1 : eol])
	if len(line) < 3 {
		return nil, false
	}
	code, err := strconv.Atoi(line[:3])
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	msg := string(p[eol+len(rawErrorHeaders):])
	if msg == "" {
		msg = line
	}
	errCode := record.CodeMalformedPayload
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		errCode = record.CodeRequestTooLarge
		msg = "the request headers are too large"
	case http.StatusNotImplemented:
		msg = "unsupported Transfer-Encoding (only chunked is accepted)"
	default:
		msg = "the request is not valid HTTP/1.1: " + msg
	}
	body, err := json.Marshal(map[string]string{"error": errCode, "message": msg})
	if err != nil {
		return nil, false
	}
	return fmt.Appendf(nil, "%s %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		proto, code, http.StatusText(code), len(body), body), true
}
