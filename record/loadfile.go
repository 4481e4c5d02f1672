package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
)

// LoadAgentFile reads an agent description from a file's content and
// returns it as an unsigned agent record (the caller fills the identity
// fields and signs, see Fill). Accepted forms:
//
//   - AgentSpec YAML (seed 004), for a .yaml or .yml name, or content that
//     is not a JSON object;
//   - JSON (for a .json name, or content starting with '{'), chosen by its
//     members: "agent" → an Announce message, its agent object (signatures
//     are ignored: whoever loads a file signs anew); "agent_type" → an
//     AgentSpec written as JSON; "communication" or "agent_profile_uri" →
//     a seed-002 agent_card; name, skills and url or supportedInterfaces →
//     an A2A Agent Card (A2ACardToAgent); otherwise an agent object (seed
//     000 §2).
//
// The result passes ValidateContent. Errors are *SourceError naming the
// file, the line for YAML, and wrapping a *FieldError naming the field.
func LoadAgentFile(name string, data []byte) (*Agent, error) {
	a, err := loadAgentFile(name, data)
	if err == nil {
		return a, nil
	}
	var se *SourceError
	if errors.As(err, &se) {
		c := *se
		c.File = name
		return nil, &c
	}
	return nil, &SourceError{File: name, Err: err}
}

func loadAgentFile(name string, data []byte) (*Agent, error) {
	if len(data) > MaxAgentFileBytes {
		return nil, fmt.Errorf("%w: file is %d bytes, limit %d", ErrTooLarge, len(data), MaxAgentFileBytes)
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return loadSpec(data)
	case ".json":
		return loadJSON(data)
	}
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
		return loadJSON(data)
	}
	return loadSpec(data)
}

func loadSpec(data []byte) (*Agent, error) {
	s, err := ParseAgentSpec(data)
	if err != nil {
		return nil, err
	}
	return s.ToAgent()
}

func loadJSON(data []byte) (*Agent, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return nil, &SourceError{Line: line, Err: &FieldError{Reason: "invalid JSON: " + err.Error()}}
		}
		return nil, fieldErr("", "must be a JSON object: %v", err)
	}
	if members == nil {
		return nil, fieldErr("", "must be a JSON object")
	}
	if _, err := CanonicalizeJSON(data); err != nil {
		return nil, err
	}
	switch {
	case members["agent"] != nil:
		var an Announce
		if err := checkMemberCase(data, reflect.TypeOf(an), ""); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &an); err != nil {
			return nil, jsonFieldErr("", err)
		}
		if _, err := CheckVersion(an.ProtocolVersion); err != nil {
			return nil, err
		}
		return decodeContent(an.Agent, "agent")
	case members["agent_type"] != nil:
		return loadSpec(data)
	case members["communication"] != nil || members["agent_profile_uri"] != nil:
		c, err := ParseAgentCard(data)
		if err != nil {
			return nil, err
		}
		return c.ToAgent()
	case IsA2ACard(members):
		return A2ACardToAgent(data)
	}
	return decodeContent(data, "")
}

// decodeContent decodes an agent object that need not be signed yet.
func decodeContent(raw []byte, prefix string) (*Agent, error) {
	a := &Agent{}
	err := DecodeAgent(raw, a)
	if err == nil {
		err = a.ValidateContent()
	}
	if err == nil {
		return a, nil
	}
	// DecodeAgent names fields under "agent.", Validate without: name them
	// relative to this file.
	if fe := (*FieldError)(nil); errors.As(err, &fe) {
		f := fe.Field
		if f == "agent" {
			f = ""
		}
		f = strings.TrimPrefix(f, "agent.")
		return nil, &FieldError{Field: join(prefix, f), Reason: fe.Reason}
	}
	return nil, err
}

// IsAnnounce reports whether data is a JSON object with an "agent" member:
// an Announce message rather than an agent description.
func IsAnnounce(data []byte) bool {
	_, ok := announceMembers(data)
	return ok
}

// IsSignedAnnounce reports whether data is an Announce that carries a
// signature: a record its agent signed, to be registered as signed
// (ParseAnnounceUnbound) rather than loaded and signed anew (LoadAgentFile
// ignores an Announce's signatures).
func IsSignedAnnounce(data []byte) bool {
	m, ok := announceMembers(data)
	if !ok {
		return false
	}
	var sig string
	return json.Unmarshal(m["signature"], &sig) == nil && sig != ""
}

func announceMembers(data []byte) (map[string]json.RawMessage, bool) {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil || len(m["agent"]) == 0 {
		return nil, false
	}
	return m, true
}
