package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// The seed-003 WebSocket registry frames: JSON text frames on /ws whose
// "type" member says what they are. The seed defines register → registered
// and list → agents; agentd adds the seed's "future extensions"
// (capabilities on register and in the list, a capability filter on list,
// unregister → unregistered, ping → pong to refresh a registration) and an
// error frame. Unknown members are ignored, as a minimal client expects.

// WebSocket frame types.
const (
	WSTypeRegister     = "register"
	WSTypeRegistered   = "registered"
	WSTypeList         = "list"
	WSTypeAgents       = "agents"
	WSTypeUnregister   = "unregister"
	WSTypeUnregistered = "unregistered"
	WSTypePing         = "ping"
	WSTypePong         = "pong"
	WSTypeError        = "error"
)

// Limits of the WebSocket frames.
const (
	// MaxWSFrameBytes bounds one frame (an agents reply is the largest).
	MaxWSFrameBytes = 1 << 20
	// MaxWSAgents bounds the agents of one agents reply; a server with more
	// must filter (list.capability) or page.
	MaxWSAgents = 4096
)

// WSNamespace is the ExternalAgentID namespace of seed-003 agent ids.
const WSNamespace = "ws"

// WSFrame is one seed-003 frame: *WSRegister, *WSRegistered, *WSList,
// *WSAgents, *WSUnregister, *WSUnregistered, *WSPing, *WSPong or *WSError.
type WSFrame interface {
	// FrameType is the frame's "type" member.
	FrameType() string
	validate() error
}

// WSRegister registers (or, with the same id, updates) an agent.
type WSRegister struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Endpoint     string   `json:"endpoint,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"` // extension
}

// WSRegistered acknowledges a register.
type WSRegistered struct {
	ID string `json:"id"`
}

// WSList asks for the registered agents.
type WSList struct {
	Capability string `json:"capability,omitempty"` // extension: only agents offering it
}

// WSAgents answers a list.
type WSAgents struct {
	Agents []WSAgent `json:"agents"`
}

// WSAgent is one agent of an agents reply.
type WSAgent struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Endpoint     string   `json:"endpoint,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"` // extension
	RegisteredAt string   `json:"registered_at"`          // RFC 3339 (ISO 8601)
}

// WSUnregister removes an agent (extension).
type WSUnregister struct {
	ID string `json:"id"`
}

// WSUnregistered acknowledges an unregister (extension).
type WSUnregistered struct {
	ID string `json:"id"`
}

// WSPing keeps the connection alive and, with an id, refreshes that agent's
// registration (extension: the seed's heartbeat).
type WSPing struct {
	ID string `json:"id,omitempty"`
}

// WSPong answers a ping (extension).
type WSPong struct {
	ID string `json:"id,omitempty"`
}

// WSError reports a refused frame: Code is one of the package's error codes
// (e.g. ErrMalformedPayload), Field the offending member when there is one.
type WSError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// FrameType implements WSFrame.
func (*WSRegister) FrameType() string { return WSTypeRegister }

// FrameType implements WSFrame.
func (*WSRegistered) FrameType() string { return WSTypeRegistered }

// FrameType implements WSFrame.
func (*WSList) FrameType() string { return WSTypeList }

// FrameType implements WSFrame.
func (*WSAgents) FrameType() string { return WSTypeAgents }

// FrameType implements WSFrame.
func (*WSUnregister) FrameType() string { return WSTypeUnregister }

// FrameType implements WSFrame.
func (*WSUnregistered) FrameType() string { return WSTypeUnregistered }

// FrameType implements WSFrame.
func (*WSPing) FrameType() string { return WSTypePing }

// FrameType implements WSFrame.
func (*WSPong) FrameType() string { return WSTypePong }

// FrameType implements WSFrame.
func (*WSError) FrameType() string { return WSTypeError }

func newWSFrame(typ string) WSFrame {
	switch typ {
	case WSTypeRegister:
		return &WSRegister{}
	case WSTypeRegistered:
		return &WSRegistered{}
	case WSTypeList:
		return &WSList{}
	case WSTypeAgents:
		return &WSAgents{}
	case WSTypeUnregister:
		return &WSUnregister{}
	case WSTypeUnregistered:
		return &WSUnregistered{}
	case WSTypePing:
		return &WSPing{}
	case WSTypePong:
		return &WSPong{}
	case WSTypeError:
		return &WSError{}
	}
	return nil
}

// ParseWSFrame decodes one frame, choosing its type by the "type" member,
// and validates it.
func ParseWSFrame(b []byte) (WSFrame, error) {
	if len(b) > MaxWSFrameBytes {
		return nil, fmt.Errorf("%w: frame is %d bytes, limit %d", ErrTooLarge, len(b), MaxWSFrameBytes)
	}
	if _, err := CanonicalizeJSON(b); err != nil {
		return nil, err
	}
	// Member names are case-sensitive: a struct probe would let
	// encoding/json read "Type" (or "TYPE") as "type".
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, jsonFieldErr("", err)
	}
	if probe == nil {
		return nil, fieldErr("", "a frame must be a JSON object")
	}
	for k := range probe {
		if k != "type" && strings.EqualFold(k, "type") {
			return nil, fieldErr(trunc(k), "unknown member; member names are case-sensitive (did you mean \"type\"?)")
		}
	}
	rawType, ok := probe["type"]
	if !ok {
		return nil, fieldErr("type", "is required")
	}
	var typ string
	if err := json.Unmarshal(rawType, &typ); err != nil {
		return nil, fieldErr("type", "must be a string")
	}
	f := newWSFrame(typ)
	if f == nil {
		return nil, fieldErr("type", "%q is not a frame type (register, list, …)", trunc(typ))
	}
	if err := checkMemberCase(b, reflect.TypeOf(f), ""); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, jsonFieldErr("", err)
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// MarshalWSFrame validates f and encodes it with its "type" member first.
func MarshalWSFrame(f WSFrame) ([]byte, error) {
	if f == nil || reflect.ValueOf(f).IsNil() {
		return nil, fieldErr("type", "no frame")
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("marshal %s frame: %w", f.FrameType(), err)
	}
	typ, _ := json.Marshal(f.FrameType())
	var out bytes.Buffer
	out.WriteString(`{"type":`)
	out.Write(typ)
	if len(body) > 2 {
		out.WriteByte(',')
		out.Write(body[1:])
	} else {
		out.WriteByte('}')
	}
	if out.Len() > MaxWSFrameBytes {
		return nil, fmt.Errorf("%w: %s frame is %d bytes, limit %d", ErrTooLarge, f.FrameType(), out.Len(), MaxWSFrameBytes)
	}
	return out.Bytes(), nil
}

func checkWSID(field, id string, required bool) error {
	if id == "" {
		if required {
			return fieldErr(field, "is required")
		}
		return nil
	}
	if len(id) > MaxIDLen || !Printable(id) {
		return fieldErr(field, "must be 1-%d printable bytes", MaxIDLen)
	}
	return nil
}

func checkWSAgentFields(path, id, name, endpoint string, caps []string) error {
	if err := checkWSID(join(path, "id"), id, true); err != nil {
		return err
	}
	if name == "" {
		return fieldErr(join(path, "name"), "is required")
	}
	if len(name) > MaxShortTextLen || !Printable(name) {
		return fieldErr(join(path, "name"), "must be printable and at most %d bytes", MaxShortTextLen)
	}
	if len(endpoint) > MaxEndpointLen || !Printable(endpoint) {
		return fieldErr(join(path, "endpoint"), "must be printable and at most %d bytes", MaxEndpointLen)
	}
	return checkIdentList(join(path, "capabilities"), caps, MaxAgentCapabilities)
}

func (f *WSRegister) validate() error {
	return checkWSAgentFields("", f.ID, f.Name, f.Endpoint, f.Capabilities)
}

func (f *WSRegistered) validate() error { return checkWSID("id", f.ID, true) }

func (f *WSList) validate() error {
	if f.Capability != "" && !ValidIdent(f.Capability) {
		return fieldErr("capability", "%q is not a valid capability id", trunc(f.Capability))
	}
	return nil
}

func (f *WSAgents) validate() error {
	if f.Agents == nil {
		return fieldErr("agents", "is required (an empty list is allowed)")
	}
	if len(f.Agents) > MaxWSAgents {
		return fieldErr("agents", "has %d agents, more than %d", len(f.Agents), MaxWSAgents)
	}
	for i, a := range f.Agents {
		path := fmt.Sprintf("agents[%d]", i)
		if err := checkWSAgentFields(path, a.ID, a.Name, a.Endpoint, a.Capabilities); err != nil {
			return err
		}
		if a.RegisteredAt == "" {
			return fieldErr(path+".registered_at", "is required")
		}
		if _, err := ParseTimestamp(a.RegisteredAt); err != nil {
			return fieldErr(path+".registered_at", "%v", err)
		}
	}
	return nil
}

func (f *WSUnregister) validate() error   { return checkWSID("id", f.ID, true) }
func (f *WSUnregistered) validate() error { return checkWSID("id", f.ID, true) }
func (f *WSPing) validate() error         { return checkWSID("id", f.ID, false) }
func (f *WSPong) validate() error         { return checkWSID("id", f.ID, false) }

func (f *WSError) validate() error {
	if f.Code == "" || len(f.Code) > 64 || !Printable(f.Code) {
		return fieldErr("code", "must be 1-64 printable bytes")
	}
	if len(f.Message) > MaxTextLen || !Printable(f.Message) {
		return fieldErr("message", "must be printable and at most %d bytes", MaxTextLen)
	}
	if len(f.Field) > MaxShortTextLen || !Printable(f.Field) {
		return fieldErr("field", "must be printable and at most %d bytes", MaxShortTextLen)
	}
	return nil
}

// ToAgent converts a register frame into an unsigned agent record (the
// signer fills the identity fields, see Fill):
//
//   - agent_id: the frame's id when it is a UUIDv4, else
//     ExternalAgentID("ws", id), with the id in metadata.external_id;
//   - agent_name: DNSLabel(name) (or of the id when the name gives none);
//     description: the name;
//   - transport: the endpoint's URL scheme as type ("http://127.0.0.1:3000"
//     → http) and the endpoint as given; "tcp" for an endpoint without a
//     scheme; {type "ws", endpoint ""} without endpoint: the agent is
//     reached through the registry connection;
//   - capabilities: each capability id with an empty version; no skills.
func (f *WSRegister) ToAgent() (*Agent, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	id, external := agentIDFor(WSNamespace, f.ID)
	a := &Agent{
		AgentID:      id,
		AgentName:    DNSLabel(f.Name),
		Capabilities: map[string]string{},
		Transport:    transportFor(f.Endpoint),
		Description:  f.Name,
	}
	if a.AgentName == "" {
		a.AgentName = DNSLabel(f.ID)
	}
	if external {
		a.Metadata = map[string]any{MetaExternalID: f.ID}
	}
	for _, c := range f.Capabilities {
		a.Capabilities[c] = ""
	}
	if err := a.ValidateContent(); err != nil {
		return nil, err
	}
	return a, nil
}

// transportFor derives a transport from an endpoint URL or address.
func transportFor(endpoint string) Transport {
	if endpoint == "" {
		return Transport{Type: "ws"}
	}
	if scheme, _, ok := strings.Cut(endpoint, "://"); ok {
		scheme = strings.ToLower(scheme)
		if len(scheme) <= 32 && identMatch(scheme) {
			return Transport{Type: scheme, Endpoint: endpoint}
		}
	}
	return Transport{Type: "tcp", Endpoint: endpoint}
}

// WSAgentFromAgent is the agents-reply entry for a record: id
// metadata.external_id (else agent_id), name metadata.display_name (else
// the description when it fits, else agent_name, else agent_id), endpoint
// the transport endpoint, capabilities every capability the agent offers,
// registered_at in UTC.
func WSAgentFromAgent(a *Agent, registeredAt time.Time) WSAgent {
	w := WSAgent{ID: a.AgentID, Endpoint: a.Transport.Endpoint, Capabilities: a.AllCapabilities(),
		RegisteredAt: registeredAt.UTC().Format(time.RFC3339)}
	if s, ok := a.Metadata[MetaExternalID].(string); ok && s != "" {
		w.ID = s
	}
	switch s, _ := a.Metadata[MetaDisplayName].(string); {
	case s != "" && len(s) <= MaxShortTextLen && Printable(s):
		w.Name = s
	case a.Description != "" && len(a.Description) <= MaxShortTextLen && Printable(a.Description):
		w.Name = a.Description
	case a.AgentName != "":
		w.Name = a.AgentName
	default:
		w.Name = a.AgentID
	}
	if len(w.Capabilities) == 0 {
		w.Capabilities = nil
	}
	return w
}
