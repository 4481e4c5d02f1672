package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/view"
	"github.com/coder/websocket"
)

// WebSocket binding constants (seed 000 §5.3).
const (
	// Subprotocol selects the seed-000 binary binding; without it the
	// connection speaks the seed-003 JSON text frames.
	Subprotocol = "agent-discovery"
	// Type prefixes of the binary frames.
	MsgAnnounce byte = 0x01
	MsgQuery    byte = 0x02
	MsgResponse byte = 0x03
)

// Frame types the API adds to record's seed-003 set.
const (
	WSTypeWatch      = "watch"     // client: start (or replace) the event stream
	WSTypeWatching   = "watching"  // server: the stream is installed
	WSTypeUnwatch    = "unwatch"   // client: stop the event stream
	WSTypeUnwatched  = "unwatched" // server: the stream is stopped
	WSTypeEvent      = "event"     // server: one registry event
	WSTypeHeartbeat  = "heartbeat" // client: alias of ping
	WSTypeQueryEnd   = "end"       // server: the last RESPONSE of a QUERY was sent
	wsMaxClientFrame = record.MaxMessageBytes + 1
	wsWriteTimeout   = 10 * time.Second
	wsOutBuffer      = 64
)

// WatchFrame asks for a stream of registry events (seed 004 watch); every
// member is optional. agent_id is an agent_id, or a seed-003 id that maps
// as register does.
type WatchFrame struct {
	Type       string   `json:"type"`
	Capability string   `json:"capability,omitempty"`
	Prefix     string   `json:"prefix,omitempty"`
	AgentID    string   `json:"agent_id,omitempty"`
	Heartbeats bool     `json:"heartbeats,omitempty"`
	Types      []string `json:"types,omitempty"`
}

// EventFrame carries one registry event (view.Event) to a watcher. Record
// is the agent's Announce on registry.agent.registered events.
type EventFrame struct {
	Type         string           `json:"type"`
	Event        view.EventType   `json:"event"`
	Time         string           `json:"time"`
	AgentID      string           `json:"agent_id,omitempty"`
	PeerID       string           `json:"peer_id,omitempty"`
	Status       record.Status    `json:"status,omitempty"`
	Reason       string           `json:"reason,omitempty"`
	Capability   string           `json:"capability,omitempty"`
	Change       string           `json:"change,omitempty"`
	Capabilities []string         `json:"capabilities,omitempty"`
	Source       store.Source     `json:"source,omitempty"`
	Record       *record.Announce `json:"record,omitempty"`
}

// ErrorFrame is the error text frame of both bindings: record.WSError
// with the supported protocol version on ErrUnsupportedVersion.
type ErrorFrame struct {
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	Supported string `json:"supported,omitempty"`
}

// QueryEndFrame follows the RESPONSE frames of a QUERY.
type QueryEndFrame struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

type outFrame struct {
	typ  websocket.MessageType
	data []byte
}

// session is one WebSocket connection. The HTTP handler's goroutine reads
// and dispatches frames; one writer goroutine sends replies and events and
// pings. Both belong to the Server, which waits for them in Close.
type session struct {
	s      *Server
	c      *websocket.Conn
	binary bool
	acc    access
	log    *slog.Logger
	ctx    context.Context // ends with the connection or at Server.Close
	cancel context.CancelFunc
	out    chan outFrame
	watch  chan *view.Subscription // reader → writer
	bound  map[string]bool         // agent ids bound to this connection (s.mu)
}

func (ss *session) bindLocked(id string) {
	if ss.bound != nil {
		ss.bound[id] = true
	}
}

func (ss *session) unbindLocked(id string) { delete(ss.bound, id) }

// checkUpgrade validates the handshake before coder/websocket does, so
// that a refused upgrade gets the API's JSON error body.
func checkUpgrade(r *http.Request) *Error {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		e := newError(http.StatusUpgradeRequired, record.CodeMalformedPayload, "Upgrade", "this endpoint speaks WebSocket (RFC 6455); send an upgrade request")
		e.header = http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}}
		return e
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		e := newError(http.StatusBadRequest, record.CodeMalformedPayload, "Sec-WebSocket-Version", "only WebSocket version 13 is supported")
		e.header = http.Header{"Sec-Websocket-Version": {"13"}}
		return e
	}
	if r.Header.Get("Sec-WebSocket-Key") == "" {
		return badRequest("Sec-WebSocket-Key", "is required")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return newError(http.StatusForbidden, record.CodeForbidden, "Origin", "cross-origin WebSocket connections are refused (origin %q, host %q)", truncate(o), truncate(r.Host))
		}
	}
	return nil
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) error {
	if err := checkUpgrade(r); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol, uiSubprotocol}})
	if err != nil {
		s.log.Debug("WebSocket upgrade failed", "err", err)
		return nil // Accept answered the client
	}
	c.SetReadLimit(wsMaxClientFrame)
	ss := &session{
		s: s, c: c, binary: c.Subprotocol() == Subprotocol, acc: accessOf(r.Context()),
		out: make(chan outFrame, wsOutBuffer), watch: make(chan *view.Subscription),
		bound: map[string]bool{},
	}
	ss.log = s.log.With("remote", r.RemoteAddr, "binary", ss.binary)
	ss.ctx, ss.cancel = context.WithCancel(s.ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.cancel()
		_ = c.Close(websocket.StatusGoingAway, "agentd is shutting down")
		return nil
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()

	writerDone := make(chan struct{})
	go ss.writeLoop(writerDone)
	// Deferred so that a panic while handling a frame (recovered and
	// logged by serveHTTP) still ends the session cleanly.
	defer func() {
		ss.cancel()
		<-writerDone
		ss.release()
	}()
	ss.readLoop()
	return nil
}

// readLoop reads frames until the connection ends. It reads with a context
// that Close does not cancel: the writer closes the connection (with a
// close handshake at shutdown), which ends the read.
func (ss *session) readLoop() {
	for {
		typ, data, err := ss.c.Read(context.Background())
		if err != nil {
			if st := websocket.CloseStatus(err); st == -1 && ss.ctx.Err() == nil {
				ss.log.Debug("WebSocket read ended", "err", err)
			}
			return
		}
		switch {
		case typ == websocket.MessageText:
			ss.handleText(data)
		case ss.binary:
			ss.handleBinary(data)
		default:
			ss.sendError(newError(http.StatusBadRequest, record.CodeMalformedPayload, "",
				"binary frames need the %q subprotocol; this connection speaks JSON text frames", Subprotocol))
		}
		if ss.ctx.Err() != nil {
			return
		}
	}
}

// writeLoop sends queued frames and watch events and pings every
// heartbeat; a missed pong closes the connection.
func (ss *session) writeLoop(done chan struct{}) {
	defer ss.s.wg.Done()
	defer close(done)
	defer func() {
		if v := recover(); v != nil {
			ss.log.Error("WebSocket writer panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			ss.cancel()
			_ = ss.c.CloseNow()
		}
	}()
	hb := ss.s.cfg.WSHeartbeat
	tick := time.NewTicker(hb)
	defer tick.Stop()
	var sub *view.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	var events <-chan view.Event
	for {
		select {
		case <-ss.ctx.Done():
			if ss.s.ctx.Err() != nil {
				_ = ss.c.Close(websocket.StatusGoingAway, "agentd is shutting down")
			} else {
				_ = ss.c.CloseNow()
			}
			return
		case f := <-ss.out:
			if err := ss.write(f); err != nil {
				ss.log.Debug("WebSocket write failed", "err", err)
				_ = ss.c.CloseNow()
				return
			}
		case ns := <-ss.watch:
			if sub != nil {
				sub.Close()
			}
			sub, events = ns, nil
			if ns != nil {
				events = ns.C()
			}
		case ev, ok := <-events:
			if !ok {
				err := sub.Err()
				sub, events = nil, nil
				e := newError(http.StatusServiceUnavailable, CodeLagged, "", "the watch fell behind and was stopped; events were lost: list, then watch again")
				if !errors.Is(err, view.ErrLagged) {
					e = newError(http.StatusServiceUnavailable, record.CodeServiceUnavailable, "", "the watch ended: %v", err)
				}
				if werr := ss.write(outFrame{websocket.MessageText, errorFrameJSON(e)}); werr != nil {
					_ = ss.c.CloseNow()
					return
				}
				continue
			}
			if err := ss.write(outFrame{websocket.MessageText, eventFrameJSON(ev)}); err != nil {
				_ = ss.c.CloseNow()
				return
			}
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ss.ctx, hb)
			err := ss.c.Ping(pctx)
			cancel()
			if err != nil && ss.ctx.Err() == nil {
				ss.log.Info("WebSocket heartbeat missed; closing", "err", err)
				_ = ss.c.CloseNow()
				return
			}
		}
	}
}

func (ss *session) write(f outFrame) error {
	ctx, cancel := context.WithTimeout(context.Background(), wsWriteTimeout)
	defer cancel()
	return ss.c.Write(ctx, f.typ, f.data)
}

// send queues a frame; it blocks while the writer is behind (so a client
// that does not read stops being read) and gives up when the session ends.
func (ss *session) send(typ websocket.MessageType, data []byte) {
	select {
	case ss.out <- outFrame{typ, data}:
	case <-ss.ctx.Done():
	}
}

func (ss *session) sendJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	ss.send(websocket.MessageText, b)
}

func (ss *session) sendError(e *Error) {
	if isReject(e.Code) {
		ss.s.m.Reject("ws", e.Code)
	}
	ss.send(websocket.MessageText, errorFrameJSON(e))
}

func errorFrameJSON(e *Error) []byte {
	msg := []rune(e.Message)
	if len(msg) > 512 {
		msg = append(msg[:512], '…')
	}
	f := ErrorFrame{Type: record.WSTypeError, Code: e.Code, Message: strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, string(msg)), Field: e.Field, Supported: e.Supported}
	b, _ := json.Marshal(f)
	return b
}

func eventFrameJSON(ev view.Event) []byte {
	f := EventFrame{Type: WSTypeEvent, Event: ev.Type, Time: ev.Time.UTC().Format(time.RFC3339Nano), AgentID: ev.AgentID,
		PeerID: ev.PeerID, Status: ev.Status, Reason: ev.Reason, Capability: ev.Capability, Change: ev.Change,
		Capabilities: ev.Capabilities, Source: ev.Source}
	if ev.Record != nil && ev.Type == view.EventRegistered {
		a := ev.Record.Announce()
		f.Record = &a
	}
	b, _ := json.Marshal(f)
	return b
}

// release ends the bindings of the session: each agent registered over it
// (and not re-registered elsewhere since) gets a lease of one heartbeat
// window, so a client that reconnects in time keeps its registration.
func (ss *session) release() {
	s := ss.s
	s.mu.Lock()
	var ids []string
	for id := range ss.bound {
		if s.wsBound[id] == ss {
			delete(s.wsBound, id)
			ids = append(ids, id)
		}
	}
	ss.bound = nil
	delete(s.sessions, ss)
	s.mu.Unlock()
	until := time.Now().Add(s.cfg.WSHeartbeat)
	for _, id := range ids {
		if err := s.n.Lease(id, until); err != nil && !errors.Is(err, node.ErrNotHosted) {
			ss.log.Warn("lease after WebSocket close failed", "agent_id", id, "err", err)
		}
	}
}

// opContext bounds one operation of a session.
func (ss *session) opContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ss.ctx, ss.s.cfg.RequestTimeout)
	return withAccess(ctx, ss.acc), cancel
}

// ---- seed-003 JSON frames ----

func (ss *session) handleText(data []byte) {
	var probe struct {
		Type *string `json:"type"`
	}
	if _, err := record.CanonicalizeJSON(data); err != nil {
		ss.sendError(badRequest("", "the frame is not valid JSON (I-JSON: UTF-8, no duplicate member names): %s", innerReason(err)))
		return
	}
	if err := json.Unmarshal(data, &probe); err != nil || probe.Type == nil {
		ss.sendError(badRequest("type", "every frame is a JSON object with a \"type\" member"))
		return
	}
	ctx, cancel := ss.opContext()
	defer cancel()
	switch *probe.Type {
	case WSTypeWatch:
		ss.handleWatch(data)
		return
	case WSTypeUnwatch:
		var f struct {
			Type string `json:"type"`
		}
		if err := decodeObject(data, &f, "", false); err != nil {
			ss.sendError(errorOf(err))
			return
		}
		select {
		case ss.watch <- nil:
		case <-ss.ctx.Done():
			return
		}
		ss.sendJSON(map[string]string{"type": WSTypeUnwatched})
		return
	case WSTypeHeartbeat:
		var f struct {
			Type string `json:"type"`
			ID   string `json:"id,omitempty"`
		}
		if err := decodeObject(data, &f, "", false); err != nil {
			ss.sendError(errorOf(err))
			return
		}
		ss.sendWSFrame(&record.WSPong{ID: f.ID})
		return
	}
	f, err := record.ParseWSFrame(data)
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	switch f := f.(type) {
	case *record.WSRegister:
		if e := requireScope(ctx, ScopeWrite); e != nil {
			ss.sendError(e)
			return
		}
		a, err := f.ToAgent()
		if err != nil {
			ss.sendError(errorOf(err))
			return
		}
		sa, err := ss.s.n.Register(ctx, a)
		if err == nil {
			err = ss.s.setLifetime(sa.Agent.AgentID, lifetimeSocket, ss, 0)
		}
		if err != nil {
			ss.sendError(errorOf(err))
			return
		}
		ss.sendWSFrame(&record.WSRegistered{ID: f.ID})
	case *record.WSList:
		ss.sendWSFrame(ss.s.wsAgents(ctx, f.Capability))
	case *record.WSUnregister:
		if e := requireScope(ctx, ScopeWrite); e != nil {
			ss.sendError(e)
			return
		}
		if err := ss.s.unregister(ctx, wsAgentID(f.ID), record.ReasonShutdown); err != nil {
			ss.sendError(errorOf(err))
			return
		}
		ss.sendWSFrame(&record.WSUnregistered{ID: f.ID})
	case *record.WSPing:
		ss.sendWSFrame(&record.WSPong{ID: f.ID})
	default:
		ss.sendError(badRequest("type", "%q frames are sent by the server, not to it", f.FrameType()))
	}
}

func (ss *session) sendWSFrame(f record.WSFrame) {
	b, err := record.MarshalWSFrame(f)
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	ss.send(websocket.MessageText, b)
}

// wsAgentID maps a seed-003 id onto an agent_id as WSRegister.ToAgent does.
func wsAgentID(id string) string {
	if record.ValidateAgentID(id) == nil {
		return id
	}
	return record.ExternalAgentID(record.WSNamespace, id)
}

// wsAgents is the agents reply: the live agents (offering capability, when
// given), each with the time this node first saw it as registered_at.
func (s *Server) wsAgents(ctx context.Context, capability string) *record.WSAgents {
	out := &record.WSAgents{Agents: []record.WSAgent{}}
	res, err := s.n.Discover(ctx, node.Query{Filter: store.Filter{Capability: capability, Limit: record.MaxWSAgents}, LocalOnly: true})
	if err != nil {
		return out
	}
	for _, r := range res {
		if r.Agent == nil || r.Stale {
			continue
		}
		at := r.Agent.Issued()
		if a, ok := s.n.View().Get(r.Agent.AgentID); ok {
			at = a.FirstSeen
		}
		wa := record.WSAgentFromAgent(r.Agent, at)
		if len(wa.Capabilities) > record.MaxAgentCapabilities {
			wa.Capabilities = wa.Capabilities[:record.MaxAgentCapabilities]
		}
		out.Agents = append(out.Agents, wa)
	}
	// An agents frame is at most record.MaxWSFrameBytes: keep the first
	// agents that fit.
	for len(out.Agents) > 0 {
		if _, err := record.MarshalWSFrame(out); !errors.Is(err, record.ErrTooLarge) {
			break
		}
		out.Agents = out.Agents[:len(out.Agents)*3/4]
	}
	return out
}

func (ss *session) handleWatch(data []byte) {
	var f WatchFrame
	if err := decodeObject(data, &f, "", false); err != nil {
		ss.sendError(errorOf(err))
		return
	}
	vf, err := watchFilter(f)
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	sub := ss.s.n.Subscribe(vf, 256)
	select {
	case ss.watch <- sub:
	case <-ss.ctx.Done():
		sub.Close()
		return
	}
	f.Type = WSTypeWatching
	ss.sendJSON(f)
}

var eventTypes = []view.EventType{view.EventRegistered, view.EventDeregistered, view.EventHeartbeat, view.EventStatus, view.EventCapabilityChanged}

func watchFilter(f WatchFrame) (view.Filter, error) {
	vf := view.Filter{Capability: f.Capability, Prefix: f.Prefix, Heartbeats: f.Heartbeats}
	if f.Capability != "" && !record.ValidIdent(f.Capability) {
		return vf, badRequest("capability", "%q is not a capability id", truncate(f.Capability))
	}
	if len(f.Prefix) > record.MaxIDLen || !record.Printable(f.Prefix) {
		return vf, badRequest("prefix", "must be printable and at most %d bytes", record.MaxIDLen)
	}
	if f.AgentID != "" {
		if len(f.AgentID) > record.MaxIDLen || !record.Printable(f.AgentID) {
			return vf, badRequest("agent_id", "must be 1-%d printable bytes", record.MaxIDLen)
		}
		vf.AgentID = wsAgentID(f.AgentID)
	}
	if len(f.Types) > len(eventTypes) {
		return vf, badRequest("types", "lists more than the %d event types", len(eventTypes))
	}
	for i, t := range f.Types {
		ok := false
		for _, et := range eventTypes {
			ok = ok || string(et) == t
		}
		if !ok {
			return vf, badRequest(fmt.Sprintf("types[%d]", i), "%q is not an event type (registry.agent.registered, …)", truncate(t))
		}
		vf.Types = append(vf.Types, view.EventType(t))
	}
	return vf, nil
}

// ---- seed-000 binary frames (subprotocol agent-discovery) ----

func (ss *session) handleBinary(data []byte) {
	if len(data) == 0 {
		ss.sendError(badRequest("type", "an empty frame has no type byte (0x01 ANNOUNCE, 0x02 QUERY)"))
		return
	}
	ctx, cancel := ss.opContext()
	defer cancel()
	body := data[1:]
	switch data[0] {
	case MsgAnnounce:
		if e := requireScope(ctx, ScopeWrite); e != nil {
			ss.sendError(e)
			return
		}
		sa, hosted, err := ss.s.registerMessage(ctx, body, nil)
		if err == nil && hosted {
			err = ss.s.setLifetime(sa.Agent.AgentID, lifetimeSocket, ss, 0)
		}
		if err != nil {
			ss.sendError(errorOf(err))
			return
		}
		ss.send(websocket.MessageBinary, append([]byte{MsgAnnounce}, sa.MarshalAnnounce()...))
	case MsgQuery:
		ss.handleQuery(ctx, body)
	case MsgResponse:
		ss.sendError(badRequest("type", "RESPONSE (0x03) frames are sent by the server, not to it"))
	default:
		ss.sendError(badRequest("type", "0x%02x is not a frame type (0x01 ANNOUNCE, 0x02 QUERY)", data[0]))
	}
}

// handleQuery answers a seed-000 Query with one RESPONSE frame per match
// (matched: true), then an end text frame with the count; a query that
// finds nothing or fails gets one error text frame instead.
func (ss *session) handleQuery(ctx context.Context, body []byte) {
	q, newer, err := record.ParseQuery(body)
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	if newer {
		ss.s.warnMinor(q.ProtocolVersion)
	}
	b := q.Query
	limit := b.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	f := store.Filter{AgentID: b.AgentID, Capability: b.Capability, Skill: b.Skill, Scene: b.Scene, Type: b.Type,
		Tags: b.Tags, Tenant: b.Tenant, Version: b.Version, Text: b.Text, Limit: limit}
	res, err := ss.s.n.Discover(ctx, node.Query{Filter: f})
	if err != nil {
		ss.sendError(errorOf(err))
		return
	}
	n := 0
	for _, r := range res {
		if r.Stale || n >= limit {
			continue
		}
		var resp record.Response
		if r.Record != nil {
			resp = record.NewResponse(r.Record, true)
		} else if r.Agent != nil {
			canon, err := record.Canonicalize(r.Agent)
			if err != nil {
				continue
			}
			resp = record.Response{ProtocolVersion: record.ProtocolVersion, Agent: canon, Matched: true}
		} else {
			continue
		}
		b, err := json.Marshal(resp)
		if err != nil {
			continue
		}
		ss.send(websocket.MessageBinary, append([]byte{MsgResponse}, b...))
		n++
	}
	if n == 0 {
		ss.sendError(errorOf(&node.DiscoveryError{Code: record.CodeNoSkillsFound, Message: "only stale cache entries match"}))
		return
	}
	ss.sendJSON(QueryEndFrame{Type: WSTypeQueryEnd, Count: n})
}
