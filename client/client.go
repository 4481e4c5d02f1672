// Package client is the Go client of agentd's local API (package api):
// the CLI uses it, and so can any Go agent that runs beside an agentd.
//
//	c, err := client.New("http://127.0.0.1:4778")
//	sa, err := c.Register(ctx, &record.Agent{…})
//	found, err := c.Discover(ctx, client.Query{Capability: "org-data-read", Version: ">=1.2.0"})
//	events, err := c.Watch(ctx, client.WatchFilter{Capability: "org-data-read"})
//
// Every method mirrors a REST endpoint (docs/api.md); Watch uses the
// WebSocket watch frame. Errors the API answers come back as *Error with
// the HTTP status, the code (ErrMalformedPayload, DISC_002, …) and the
// offending field; a daemon that does not answer at all is an error
// matching ErrUnreachable whose message names the address.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/record"
)

// DefaultAddr is the API address of a daemon with the default configuration.
const DefaultAddr = "127.0.0.1:4778"

// MaxResponseBytes bounds a response body the client reads.
const MaxResponseBytes = 64 << 20

// ErrUnreachable matches the error of a request that got no answer: the
// daemon is not running, or not at that address.
var ErrUnreachable = errors.New("agentd is not reachable")

// Error is an error answered by the API.
type Error struct {
	Status    int    `json:"-"`
	Code      string `json:"error"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	Supported string `json:"supported,omitempty"`
}

func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Field != "" && !strings.Contains(e.Message, e.Field) {
		s += " (field " + e.Field + ")"
	}
	return s
}

// IsNotFound reports whether err says nothing matched: DISC_002 (no agent
// or skill found) or ErrNotFound (not hosted by this daemon).
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == record.CodeNoSkillsFound || e.Code == record.CodeNotFound)
}

type unreachableError struct {
	addr  string
	cause string
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach agentd at %s: %s (is `agentd run` running?)", e.addr, e.cause)
}

func (e *unreachableError) Unwrap() error { return ErrUnreachable }

// Client talks to one agentd. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	token string
}

// Option configures a Client.
type Option func(*Client) error

// WithToken sends a JWT bearer token with every request (needed when the
// API is served beyond loopback).
func WithToken(token string) Option {
	return func(c *Client) error {
		if strings.ContainsAny(token, " \t\r\n") {
			return errors.New("client: the token must not contain whitespace")
		}
		c.token = token
		return nil
	}
}

// WithHTTPClient uses hc for requests (default: a client with a 30 s
// timeout).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: nil http.Client")
		}
		c.hc = hc
		return nil
	}
}

// New returns a client of the API at baseURL: "http://host:port" (or
// https), or just "host:port".
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultAddr
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: API address %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: API address %q: the scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: API address %q has no host", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, hc: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// BaseURL returns the API's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

func (c *Client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends a request and decodes a 2xx JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if len(b) > MaxResponseBytes {
		return fmt.Errorf("answer of %s %s is larger than %d bytes", method, path, MaxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorOf(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// errorOf decodes an error answer.
func errorOf(status int, b []byte) *Error {
	e := &Error{}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		e = &Error{Code: "HTTP_" + strconv.Itoa(status), Message: msg}
	}
	e.Status = status
	return e
}

// transportError turns a failed round trip into one line naming the
// address when nothing answered.
func (c *Client) transportError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		cause := op.Err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			cause = errno.Error()
		}
		return &unreachableError{addr: c.base.String(), cause: cause}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return &unreachableError{addr: c.base.String(), cause: dnsErr.Error()}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &unreachableError{addr: c.base.String(), cause: "no answer in time"}
	}
	return fmt.Errorf("request to agentd at %s failed: %w", c.base, err)
}
