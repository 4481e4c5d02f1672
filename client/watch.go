package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/coder/websocket"
)

// WatchFilter selects the events of a watch; empty fields match all.
type WatchFilter struct {
	// Capability: only events about agents offering it (or about it).
	Capability string `json:"capability,omitempty"`
	// Prefix: only events whose capabilities start with it.
	Prefix string `json:"prefix,omitempty"`
	// AgentID: only events of one agent.
	AgentID string `json:"agent_id,omitempty"`
	// Heartbeats adds registry.agent.heartbeat events (off by default).
	Heartbeats bool `json:"heartbeats,omitempty"`
	// Types restricts the event types (registry.agent.registered, …).
	Types []string `json:"types,omitempty"`
}

// Event is one registry event (seed 004): registry.agent.registered,
// .deregistered, .heartbeat, .status or registry.capability.changed. A
// watch that ends because of the daemon (it fell behind, or shut down)
// delivers a last event of type "error" with Err set.
type Event struct {
	Type         string           `json:"event"`
	Time         time.Time        `json:"time"`
	AgentID      string           `json:"agent_id,omitempty"`
	PeerID       string           `json:"peer_id,omitempty"`
	Status       record.Status    `json:"status,omitempty"`
	Reason       string           `json:"reason,omitempty"`
	Capability   string           `json:"capability,omitempty"`
	Change       string           `json:"change,omitempty"`
	Capabilities []string         `json:"capabilities,omitempty"`
	Source       string           `json:"source,omitempty"`
	Record       *record.Announce `json:"record,omitempty"`
	Err          *Error           `json:"error,omitempty"`
}

// EventError is the Type of the event that ends a watch with an error.
const EventError = "error"

// Watch streams the registry events matching f until ctx ends (or the
// daemon ends the stream). The returned channel is closed then; its
// goroutine belongs to ctx.
func (c *Client) Watch(ctx context.Context, f WatchFilter) (<-chan Event, error) {
	u := *c.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path += "/ws"
	hc := *c.hc
	hc.Timeout = 0 // coder/websocket refuses a client timeout; ctx bounds the handshake
	opts := &websocket.DialOptions{HTTPClient: &hc, HTTPHeader: http.Header{}}
	if c.token != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+c.token)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, resp, err := websocket.Dial(dctx, u.String(), opts)
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var b []byte
			if resp.Body != nil {
				b, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			}
			return nil, errorOf(resp.StatusCode, b)
		}
		return nil, c.transportError(err)
	}
	conn.SetReadLimit(record.MaxWSFrameBytes + 1)
	fail := func(err error) (<-chan Event, error) {
		_ = conn.CloseNow()
		return nil, err
	}
	frame := struct {
		Type string `json:"type"`
		WatchFilter
	}{"watch", f}
	b, err := json.Marshal(frame)
	if err != nil {
		return fail(err)
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fail(fmt.Errorf("send watch: %w", err))
	}
	// Events may arrive before the "watching" acknowledgement.
	var early []Event
	for {
		ev, typ, err := readFrame(ctx, conn)
		if err != nil {
			return fail(fmt.Errorf("watch: %w", err))
		}
		if typ == "watching" {
			break
		}
		if typ == "error" {
			return fail(ev.Err)
		}
		if typ == "event" {
			early = append(early, ev)
		}
	}
	out := make(chan Event, 64+len(early))
	for _, ev := range early {
		out <- ev
	}
	go func() {
		defer close(out)
		defer func() { _ = conn.CloseNow() }()
		for {
			ev, typ, err := readFrame(ctx, conn)
			if err != nil {
				if ctx.Err() != nil {
					_ = conn.Close(websocket.StatusNormalClosure, "")
					return
				}
				if st := websocket.CloseStatus(err); st == websocket.StatusGoingAway {
					ev = Event{Type: EventError, Time: time.Now(), Err: &Error{Code: record.CodeServiceUnavailable, Message: "agentd is shutting down"}}
				} else {
					ev = Event{Type: EventError, Time: time.Now(), Err: &Error{Code: record.CodeServiceUnavailable, Message: "the watch connection ended: " + err.Error()}}
				}
				select {
				case out <- ev:
				case <-ctx.Done():
				}
				return
			}
			switch typ {
			case "event":
			case "error":
				ev.Type = EventError
			default:
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				_ = conn.Close(websocket.StatusNormalClosure, "")
				return
			}
			if typ == "error" && ev.Err != nil && (ev.Err.Code == "ErrLagged" || ev.Err.Code == record.CodeServiceUnavailable) {
				return
			}
		}
	}()
	return out, nil
}

// readFrame reads one text frame: an event, or an error as Event.Err.
func readFrame(ctx context.Context, conn *websocket.Conn) (Event, string, error) {
	typ, b, err := conn.Read(ctx)
	if err != nil {
		return Event{}, "", err
	}
	if typ != websocket.MessageText {
		return Event{}, "", nil
	}
	var probe struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Event{}, "", fmt.Errorf("undecodable frame: %w", err)
	}
	switch probe.Type {
	case "event":
		var ev Event
		if err := json.Unmarshal(b, &ev); err != nil {
			return Event{}, "", fmt.Errorf("undecodable event: %w", err)
		}
		return ev, "event", nil
	case "error":
		e := &Error{Code: probe.Code, Message: probe.Message, Field: probe.Field}
		if e.Code == "" {
			e.Code = record.CodeInternal
		}
		return Event{Type: EventError, Time: time.Now(), Err: e}, "error", nil
	}
	return Event{}, probe.Type, nil
}
