package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// JSON-RPC 2.0 error codes: the standard ones and agentd's application
// codes (seed 002 uses -32001 for a failed registration).
const (
	RPCParseError     = -32700
	RPCInvalidRequest = -32600
	RPCMethodNotFound = -32601
	RPCInvalidParams  = -32602
	RPCInternalError  = -32603

	RPCRegistrationFailed = -32001 // rtfs.registry.register refused the card
	RPCDiscoveryFailed    = -32002 // the resolver timed out or had no network (data.error DISC_001/DISC_005)
	RPCForbidden          = -32003 // the token lacks the method's scope
	RPCNotFound           = -32004 // the agent is not registered on this node
)

// Limits and defaults of the JSON-RPC surface.
const (
	MaxRPCBatch        = 64
	DefaultTTLSeconds  = 3600 // seed 002
	maxDiscoveryFields = 16
)

// JSON-RPC method names (seed 002).
const (
	MethodRegister   = "rtfs.registry.register"
	MethodDiscover   = "rtfs.registry.discover"
	MethodDeregister = "rtfs.registry.deregister"
	MethodHeartbeat  = "rtfs.registry.heartbeat"
)

// RPCError is a JSON-RPC error object. Data names the agentd error code
// and the offending field.
type RPCError struct {
	Code    int           `json:"code"`
	Message string        `json:"message"`
	Data    *RPCErrorData `json:"data,omitempty"`
}

// RPCErrorData details an RPCError.
type RPCErrorData struct {
	Error     string `json:"error,omitempty"`
	Field     string `json:"field,omitempty"`
	Supported string `json:"supported,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC %d: %s", e.Code, e.Message) }

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

var jsonNull = json.RawMessage("null")

func rpcErr(code int, field, apiCode, format string, args ...any) *RPCError {
	e := &RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
	if field != "" || apiCode != "" {
		e.Data = &RPCErrorData{Error: apiCode, Field: field}
	}
	return e
}

// handleRPC serves POST /rpc: one JSON-RPC 2.0 request or a batch. Every
// JSON-RPC answer is HTTP 200 (errors are in the error objects); a batch
// of notifications only gets 204. Only authentication (401), a body that
// is too large (413) or not JSON-typed (415) are HTTP errors.
func (s *Server) handleRPC(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusBadRequest {
			writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: jsonNull, Error: rpcErr(RPCInvalidRequest, "", record.CodeMalformedPayload, "%s", e.Message)})
			return nil
		}
		return err
	}
	if _, err := record.CanonicalizeJSON(body); err != nil {
		writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: jsonNull,
			Error: rpcErr(RPCParseError, "", record.CodeMalformedPayload, "Parse error: %s", innerReason(err))})
		return nil
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var calls []json.RawMessage
		if err := json.Unmarshal(trimmed, &calls); err != nil {
			writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: jsonNull, Error: rpcErr(RPCParseError, "", "", "Parse error: %v", err)})
			return nil
		}
		if len(calls) == 0 {
			writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: jsonNull, Error: rpcErr(RPCInvalidRequest, "", "", "Invalid Request: an empty batch")})
			return nil
		}
		if len(calls) > MaxRPCBatch {
			writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: jsonNull, Error: rpcErr(RPCInvalidRequest, "", "", "Invalid Request: a batch of %d calls; at most %d", len(calls), MaxRPCBatch)})
			return nil
		}
		out := make([]rpcResponse, 0, len(calls))
		for _, c := range calls {
			if resp, ok := s.rpcCall(r.Context(), c); ok {
				out = append(out, resp)
			}
		}
		if len(out) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	resp, ok := s.rpcCall(r.Context(), trimmed)
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// rpcCall runs one call; ok is false for a notification (no answer).
func (s *Server) rpcCall(ctx context.Context, raw json.RawMessage) (rpcResponse, bool) {
	resp := rpcResponse{JSONRPC: "2.0", ID: jsonNull}
	defer func() {
		if resp.Error != nil && resp.Error.Code == RPCInvalidRequest {
			s.m.Reject("rpc", record.CodeMalformedPayload)
		}
	}()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		resp.Error = rpcErr(RPCInvalidRequest, "", "", "Invalid Request: a call is a JSON object")
		return resp, true
	}
	id, hasID := m["id"]
	if hasID {
		switch t := bytes.TrimSpace(id); {
		case len(t) == 0:
		case t[0] == '"', t[0] == '-' || (t[0] >= '0' && t[0] <= '9'), string(t) == "null":
			resp.ID = t
		default:
			resp.Error = rpcErr(RPCInvalidRequest, "id", "", "Invalid Request: id must be a string, a number or null")
			return resp, true
		}
	}
	var version, method string
	if err := json.Unmarshal(m["jsonrpc"], &version); err != nil || version != "2.0" {
		resp.Error = rpcErr(RPCInvalidRequest, "jsonrpc", "", `Invalid Request: jsonrpc must be "2.0"`)
		return resp, true
	}
	if err := json.Unmarshal(m["method"], &method); err != nil || method == "" {
		resp.Error = rpcErr(RPCInvalidRequest, "method", "", "Invalid Request: method must be a non-empty string")
		return resp, true
	}
	params := bytes.TrimSpace(m["params"])
	if len(params) > 0 && params[0] == '[' {
		resp.Error = rpcErr(RPCInvalidParams, "params", "", "Invalid params: pass params by name (a JSON object), not by position")
		return resp, true
	}
	if len(params) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	if params[0] != '{' {
		resp.Error = rpcErr(RPCInvalidParams, "params", "", "Invalid params: params must be a JSON object")
		return resp, true
	}
	var result any
	var rerr *RPCError
	switch method {
	case MethodRegister:
		result, rerr = s.rpcRegister(ctx, params)
	case MethodDiscover:
		result, rerr = s.rpcDiscover(ctx, params)
	case MethodDeregister:
		result, rerr = s.rpcDeregister(ctx, params)
	case MethodHeartbeat:
		result, rerr = s.rpcHeartbeat(ctx, params)
	default:
		rerr = rpcErr(RPCMethodNotFound, "method", "", "Method not found: %q (methods: %s, %s, %s, %s)", truncate(method), MethodRegister, MethodDiscover, MethodDeregister, MethodHeartbeat)
	}
	if !hasID {
		return resp, false
	}
	if rerr != nil {
		switch rerr.Code {
		case RPCInvalidParams, RPCRegistrationFailed, RPCForbidden:
			reason := record.CodeMalformedPayload
			if rerr.Data != nil && rerr.Data.Error != "" {
				reason = rerr.Data.Error
			}
			s.m.Reject("rpc", reason)
		}
		resp.Error = rerr
		return resp, true
	}
	b, err := json.Marshal(result)
	if err != nil {
		resp.Error = rpcErr(RPCInternalError, "", record.CodeInternal, "Internal error")
		return resp, true
	}
	resp.Result = b
	return resp, true
}

// invalidParams turns a decoding or validation error into -32602.
func invalidParams(err error) *RPCError {
	var fe *record.FieldError
	if errors.As(err, &fe) {
		return rpcErr(RPCInvalidParams, fe.Field, record.CodeMalformedPayload, "Invalid params: %s", fe.Error())
	}
	return rpcErr(RPCInvalidParams, "", record.CodeMalformedPayload, "Invalid params: %v", err)
}

// fromAPIError maps an API error onto a JSON-RPC error with code.
func fromAPIError(code int, prefix string, err error) *RPCError {
	e := errorOf(err)
	switch {
	case e.Status == http.StatusForbidden && e.Code == record.CodeForbidden && e.Field == "scope":
		code = RPCForbidden
	case e.Status >= 500 && e.Code == record.CodeInternal:
		code = RPCInternalError
	}
	re := &RPCError{Code: code, Message: prefix + e.Message, Data: &RPCErrorData{Error: e.Code, Field: e.Field, Supported: e.Supported}}
	return re
}

// rtfsAgentID maps a seed-002 agent_id as AgentCard.ToAgent does.
func rtfsAgentID(id string) string {
	if record.ValidateAgentID(id) == nil {
		return id
	}
	return record.ExternalAgentID(record.CardNamespace, id)
}

// RegisterParams are the params of rtfs.registry.register.
type RegisterParams struct {
	AgentCard   json.RawMessage `json:"agent_card"`
	EndpointURL string          `json:"endpoint_url,omitempty"`
	TTLSeconds  *int64          `json:"ttl_seconds,omitempty"`
}

// RegisterResult is the result of rtfs.registry.register. agent_id is the
// card's id; agent_uuid the agent_id of the record agentd signed.
type RegisterResult struct {
	Status    string `json:"status"`
	AgentID   string `json:"agent_id"`
	AgentUUID string `json:"agent_uuid"`
	ExpiresAt string `json:"expires_at"`
}

func (s *Server) rpcRegister(ctx context.Context, raw []byte) (any, *RPCError) {
	if e := requireScope(ctx, ScopeWrite); e != nil {
		return nil, fromAPIError(RPCForbidden, "", e)
	}
	var p RegisterParams
	if err := decodeObject(raw, &p, "", false); err != nil {
		return nil, invalidParams(err)
	}
	if len(p.AgentCard) == 0 || string(p.AgentCard) == "null" {
		return nil, invalidParams(&record.FieldError{Field: "agent_card", Reason: "is required"})
	}
	if len(p.EndpointURL) > record.MaxEndpointLen || !record.Printable(p.EndpointURL) {
		return nil, invalidParams(&record.FieldError{Field: "endpoint_url", Reason: fmt.Sprintf("must be printable and at most %d bytes", record.MaxEndpointLen)})
	}
	ttl := int64(DefaultTTLSeconds)
	if p.TTLSeconds != nil {
		ttl = *p.TTLSeconds
	}
	if ttl < 1 || ttl > record.MaxTTLSeconds {
		return nil, invalidParams(&record.FieldError{Field: "ttl_seconds", Reason: fmt.Sprintf("must be between 1 and %d", record.MaxTTLSeconds)})
	}
	fail := func(err error) *RPCError {
		e := fromAPIError(RPCRegistrationFailed, "Registration failed: ", err)
		if e.Data != nil && e.Data.Field != "" && e.Code == RPCRegistrationFailed {
			e.Data.Field = joinField("agent_card", strings.TrimPrefix(e.Data.Field, "agent."))
		}
		return e
	}
	card, err := record.ParseAgentCard(p.AgentCard)
	if err != nil {
		return nil, fail(err)
	}
	a, err := card.ToAgent()
	if err != nil {
		return nil, fail(err)
	}
	sa, err := s.n.Register(ctx, a)
	if err != nil {
		return nil, fail(err)
	}
	d := time.Duration(ttl) * time.Second
	if err := s.setLifetime(sa.Agent.AgentID, lifetimeLease, nil, d); err != nil {
		return nil, fail(err)
	}
	until, _ := s.n.LeaseOf(sa.Agent.AgentID)
	return RegisterResult{Status: "registered", AgentID: card.AgentID, AgentUUID: sa.Agent.AgentID,
		ExpiresAt: until.UTC().Format(time.RFC3339)}, nil
}

// DiscoverParams are the params of rtfs.registry.discover. All criteria
// are ANDed; discovery_tags must all be present; discovery_query's
// text_search (or q) is free text over names, descriptions and ids, and
// every other member must equal the agent_card metadata member of that
// name.
type DiscoverParams struct {
	CapabilityID      string                     `json:"capability_id,omitempty"`
	AgentID           string                     `json:"agent_id,omitempty"`
	DiscoveryTags     []string                   `json:"discovery_tags,omitempty"`
	DiscoveryQuery    map[string]json.RawMessage `json:"discovery_query,omitempty"`
	VersionConstraint string                     `json:"version_constraint,omitempty"`
	Limit             int                        `json:"limit,omitempty"`
}

// DiscoverResult is the result of rtfs.registry.discover.
type DiscoverResult struct {
	Agents []*record.AgentCard `json:"agents"`
}

func (s *Server) rpcDiscover(ctx context.Context, raw []byte) (any, *RPCError) {
	if e := requireScope(ctx, ScopeRead); e != nil {
		return nil, fromAPIError(RPCForbidden, "", e)
	}
	var p DiscoverParams
	if err := decodeObject(raw, &p, "", false); err != nil {
		return nil, invalidParams(err)
	}
	f := store.Filter{Capability: p.CapabilityID, Tags: p.DiscoveryTags, Version: p.VersionConstraint, Limit: p.Limit}
	bad := func(field, format string, args ...any) (any, *RPCError) {
		return nil, invalidParams(&record.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if f.Capability != "" && !record.ValidIdent(f.Capability) {
		return bad("capability_id", "%q is not a capability id", truncate(f.Capability))
	}
	if p.AgentID != "" {
		if len(p.AgentID) > record.MaxIDLen || !record.Printable(p.AgentID) {
			return bad("agent_id", "must be 1-%d printable bytes", record.MaxIDLen)
		}
		f.AgentID = rtfsAgentID(p.AgentID)
	}
	if len(f.Tags) > record.MaxTags {
		return bad("discovery_tags", "has %d tags, more than %d", len(f.Tags), record.MaxTags)
	}
	for i, t := range f.Tags {
		if t == "" || len(t) > record.MaxIDLen || !record.Printable(t) {
			return bad(fmt.Sprintf("discovery_tags[%d]", i), "must be 1-%d printable bytes", record.MaxIDLen)
		}
	}
	if len(f.Version) > record.MaxShortTextLen {
		return bad("version_constraint", "is longer than %d bytes", record.MaxShortTextLen)
	}
	if _, err := f.Compile(); err != nil {
		return bad("version_constraint", "%s", strings.TrimPrefix(err.Error(), "version: "))
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return bad("limit", "must be between 1 and %d", MaxLimit)
	}
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if len(p.DiscoveryQuery) > maxDiscoveryFields {
		return bad("discovery_query", "has %d members, more than %d", len(p.DiscoveryQuery), maxDiscoveryFields)
	}
	meta := map[string][]byte{}
	for k, v := range p.DiscoveryQuery {
		switch k {
		case "text_search", "q":
			var t string
			if err := json.Unmarshal(v, &t); err != nil || len(t) > record.MaxShortTextLen || !record.Printable(t) {
				return bad("discovery_query."+k, "must be a printable string of at most %d bytes", record.MaxShortTextLen)
			}
			f.Text = strings.TrimSpace(strings.Join([]string{f.Text, t}, " "))
		default:
			canon, err := record.CanonicalizeJSON(v)
			if err != nil || len(k) > record.MaxIDLen {
				return bad("discovery_query."+truncate(k), "is not a usable JSON value")
			}
			meta[k] = canon
		}
	}
	out := DiscoverResult{Agents: []*record.AgentCard{}}
	res, err := s.n.Discover(ctx, node.Query{Filter: f})
	var de *node.DiscoveryError
	if errors.As(err, &de) && de.Code == record.CodeNoSkillsFound {
		return out, nil
	}
	if err != nil {
		e := fromAPIError(RPCDiscoveryFailed, "Discovery failed: ", err)
		if e.Code == RPCDiscoveryFailed && e.Data != nil && e.Data.Field == "version" {
			e.Code, e.Data.Field = RPCInvalidParams, "version_constraint"
		}
		return nil, e
	}
	for _, r := range res {
		if r.Stale || r.Agent == nil || !metadataMatches(r.Agent, meta) {
			continue
		}
		out.Agents = append(out.Agents, record.CardFromAgent(r.Agent))
		if len(out.Agents) >= f.Limit {
			break
		}
	}
	return out, nil
}

// metadataMatches reports whether every structured discovery_query member
// equals the agent's metadata member of that name (compared as canonical
// JSON).
func metadataMatches(a *record.Agent, want map[string][]byte) bool {
	for k, v := range want {
		got, ok := a.Metadata[k]
		if !ok {
			return false
		}
		c, err := record.Canonicalize(got)
		if err != nil || !bytes.Equal(c, v) {
			return false
		}
	}
	return true
}

// DeregisterParams are the params of rtfs.registry.deregister.
type DeregisterParams struct {
	AgentID string `json:"agent_id"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) rpcDeregister(ctx context.Context, raw []byte) (any, *RPCError) {
	if e := requireScope(ctx, ScopeWrite); e != nil {
		return nil, fromAPIError(RPCForbidden, "", e)
	}
	var p DeregisterParams
	if err := decodeObject(raw, &p, "", false); err != nil {
		return nil, invalidParams(err)
	}
	id, rerr := rpcTarget(p.AgentID)
	if rerr != nil {
		return nil, rerr
	}
	reason := record.UnregisterReason(p.Reason)
	if reason == "" {
		reason = record.ReasonShutdown
	}
	if !reason.Valid() {
		return nil, invalidParams(&record.FieldError{Field: "reason", Reason: "must be SHUTDOWN, ERROR, MAINTENANCE or UPGRADE"})
	}
	if err := s.unregister(ctx, id, reason); err != nil {
		if errors.Is(err, node.ErrNotHosted) {
			return nil, rpcErr(RPCNotFound, "agent_id", record.CodeNotFound, "agent %q is not registered on this node", truncate(p.AgentID))
		}
		return nil, fromAPIError(RPCInvalidParams, "", err)
	}
	return map[string]string{"status": "deregistered", "agent_id": p.AgentID}, nil
}

func rpcTarget(id string) (string, *RPCError) {
	if id == "" {
		return "", invalidParams(&record.FieldError{Field: "agent_id", Reason: "is required"})
	}
	if len(id) > record.MaxIDLen || !record.Printable(id) {
		return "", invalidParams(&record.FieldError{Field: "agent_id", Reason: fmt.Sprintf("must be 1-%d printable bytes", record.MaxIDLen)})
	}
	return rtfsAgentID(id), nil
}

// HeartbeatParams are the params of rtfs.registry.heartbeat: it renews the
// registration's lease for ttl_seconds (default: the ttl it was registered
// with) and, with status, sets the agent's health.
type HeartbeatParams struct {
	AgentID    string `json:"agent_id"`
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
	Status     string `json:"status,omitempty"`
}

// HeartbeatResult is the result of rtfs.registry.heartbeat; expires_at is
// empty for a registration without a lease.
type HeartbeatResult struct {
	Status    string        `json:"status"` // "alive"
	AgentID   string        `json:"agent_id"`
	Health    record.Status `json:"health,omitempty"`
	ExpiresAt string        `json:"expires_at,omitempty"`
}

func (s *Server) rpcHeartbeat(ctx context.Context, raw []byte) (any, *RPCError) {
	if e := requireScope(ctx, ScopeWrite); e != nil {
		return nil, fromAPIError(RPCForbidden, "", e)
	}
	var p HeartbeatParams
	if err := decodeObject(raw, &p, "", false); err != nil {
		return nil, invalidParams(err)
	}
	id, rerr := rpcTarget(p.AgentID)
	if rerr != nil {
		return nil, rerr
	}
	if p.TTLSeconds != nil && (*p.TTLSeconds < 1 || *p.TTLSeconds > record.MaxTTLSeconds) {
		return nil, invalidParams(&record.FieldError{Field: "ttl_seconds", Reason: fmt.Sprintf("must be between 1 and %d", record.MaxTTLSeconds)})
	}
	notHosted := rpcErr(RPCNotFound, "agent_id", record.CodeNotFound, "agent %q is not registered on this node", truncate(p.AgentID))
	a, ok := s.n.View().Get(id)
	if !ok || !a.Local {
		return nil, notHosted
	}
	if p.Status != "" {
		if err := s.n.SetStatus(ctx, id, record.Status(p.Status)); err != nil {
			if errors.Is(err, node.ErrNotHosted) {
				return nil, notHosted
			}
			return nil, fromAPIError(RPCInvalidParams, "Invalid params: ", err)
		}
	}
	s.mu.Lock()
	ttl, leased := s.rpcTTL[id]
	s.mu.Unlock()
	if _, has := s.n.LeaseOf(id); has && !leased {
		ttl, leased = DefaultTTLSeconds*time.Second, true
	}
	if p.TTLSeconds != nil {
		ttl, leased = time.Duration(*p.TTLSeconds)*time.Second, true
	}
	out := HeartbeatResult{Status: "alive", AgentID: p.AgentID}
	if leased {
		if err := s.setLifetime(id, lifetimeLease, nil, ttl); err != nil {
			if errors.Is(err, node.ErrNotHosted) {
				return nil, notHosted
			}
			return nil, fromAPIError(RPCInternalError, "", err)
		}
		until, _ := s.n.LeaseOf(id)
		out.ExpiresAt = until.UTC().Format(time.RFC3339)
	}
	if v, ok := s.n.View().Get(id); ok {
		out.Health = v.Status
	}
	return out, nil
}
