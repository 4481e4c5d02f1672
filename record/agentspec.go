package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// AgentSpec is the seed-004 AgentSpec (§3.1) with agentd's extensions. It
// is read from YAML (ParseAgentSpec); the member names are the json tags,
// and JSON, being YAML, is accepted too.
//
// agentd relaxes the seed's required members to what a record needs:
// agent_type, version, and capabilities or skills; nats_subject or endpoint
// gives the transport. The seed's numeric bounds are enforced.
type AgentSpec struct {
	AgentType          string            `json:"agent_type"`
	Version            string            `json:"version"`
	Capabilities       []SpecCapability  `json:"capabilities,omitempty"`
	NatsSubject        string            `json:"nats_subject,omitempty"`
	ConsumerGroup      string            `json:"consumer_group,omitempty"`
	SupportedPatterns  []string          `json:"supported_patterns,omitempty"`
	MaxConcurrentTasks *int64            `json:"max_concurrent_tasks,omitempty"`
	TaskTimeoutMS      *int64            `json:"task_timeout_ms,omitempty"`
	LLMTimeoutMS       *int64            `json:"llm_timeout_ms,omitempty"`
	MaxRetries         *int64            `json:"max_retries,omitempty"`
	ReflectionConfig   *ReflectionConfig `json:"reflection_config,omitempty"`
	Evaluators         []string          `json:"evaluators,omitempty"`
	Tools              []string          `json:"tools,omitempty"`
	OwnerTeam          string            `json:"owner_team,omitempty"`
	TenantScope        *string           `json:"tenant_scope,omitempty"` // null: shared across tenants
	Description        string            `json:"description,omitempty"`
	Tags               map[string]string `json:"tags,omitempty"`
	Status             string            `json:"status,omitempty"` // registered | ready | draining | deregistered
	RegisteredAt       string            `json:"registered_at,omitempty"`
	LastHeartbeat      *string           `json:"last_heartbeat,omitempty"`

	// agentd extensions.
	AgentID   string    `json:"agent_id,omitempty"`   // a UUIDv4; empty: the signer's
	AgentName string    `json:"agent_name,omitempty"` // a DNS label; empty: DNSLabel(agent_type)
	SkillType SkillType `json:"skill_type,omitempty"` // of the skill the capabilities form; default tool-skill
	Endpoint  string    `json:"endpoint,omitempty"`   // transport endpoint (URL or host:port)
	Scenes    []string  `json:"scenes,omitempty"`     // of the skill the capabilities form
	Skills    []Skill   `json:"skills,omitempty"`     // seed-001 skills, record field names

	lines map[string]int // field path → YAML line, for error messages
}

// SpecCapability is the seed-004 AgentCapability.
type SpecCapability struct {
	Name           string          `json:"name"`
	Description    string          `json:"description,omitempty"`
	InputSchema    json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema   json.RawMessage `json:"output_schema,omitempty"`
	ConfidenceHint *float64        `json:"confidence_hint,omitempty"`
}

// ReflectionConfig is the seed-004 ReflectionConfig.
type ReflectionConfig struct {
	Enabled   *bool    `json:"enabled,omitempty"`
	MaxRounds *int64   `json:"max_rounds,omitempty"`
	Criteria  []string `json:"criteria,omitempty"`
	Model     string   `json:"model,omitempty"`
}

// The seed-004 lifecycle states (AgentStatus).
const (
	SpecRegistered   = "registered"
	SpecReady        = "ready"
	SpecDraining     = "draining"
	SpecDeregistered = "deregistered"
)

// MetaAgentType is the metadata key holding the AgentSpec agent_type; the
// other seed-004 members that have no place in the record are kept in
// metadata under their own names.
const MetaAgentType = "agent_type"

// MaxAgentFileBytes bounds an agent file (AgentSpec YAML, agent JSON,
// Announce JSON, agent_card JSON).
const MaxAgentFileBytes = 256 << 10

const (
	maxSpecNodes = 50000
	maxSpecList  = 64
)

var specPatterns = []string{"coordinator_managed", "swarm_peer", "blackboard", "market_bidding"}

// SourceError locates an error in a document: the file (when known) and
// the 1-based line (for YAML). It wraps the error, usually a *FieldError.
type SourceError struct {
	File string
	Line int
	Err  error
}

func (e *SourceError) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	case e.File != "":
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return e.Err.Error()
}

// Unwrap returns the located error.
func (e *SourceError) Unwrap() error { return e.Err }

var yamlLineRe = regexp.MustCompile(`line (\d+)`)

// ParseAgentSpec decodes AgentSpec YAML strictly (an unknown or repeated
// member, a wrong type, a YAML alias or a second document is an error) and
// validates it. Errors are *SourceError with the line, wrapping a
// *FieldError naming the member, e.g. "line 12: capabilities[1].name: …".
func ParseAgentSpec(data []byte) (*AgentSpec, error) {
	if len(data) > MaxAgentFileBytes {
		return nil, fmt.Errorf("%w: AgentSpec is %d bytes, limit %d", ErrTooLarge, len(data), MaxAgentFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fieldErr("", "the AgentSpec document is empty")
		}
		return nil, yamlSyntaxErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlSyntaxErr(err)
		}
		return nil, &SourceError{Line: extra.Line, Err: fieldErr("", "a second YAML document follows the AgentSpec")}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	s := &AgentSpec{}
	d := &specDecoder{lines: map[string]int{}}
	if err := d.decode(root, reflect.ValueOf(s).Elem(), ""); err != nil {
		return nil, err
	}
	s.lines = d.lines
	if err := s.Validate(); err != nil {
		return nil, s.locate(err)
	}
	return s, nil
}

func yamlSyntaxErr(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	return &SourceError{Line: line, Err: &FieldError{Field: "", Reason: "invalid YAML: " + msg}}
}

// locate wraps a *FieldError of the spec with the line of its field (or of
// the nearest enclosing field).
func (s *AgentSpec) locate(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) || s.lines == nil {
		return err
	}
	for p := fe.Field; p != ""; {
		if l, ok := s.lines[p]; ok {
			return &SourceError{Line: l, Err: err}
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return err
}

// specDecoder decodes a yaml.Node into Go values by their json tags,
// strictly, recording the line of every member.
type specDecoder struct {
	lines map[string]int
	nodes int
}

func nodeErr(n *yaml.Node, field, format string, args ...any) error {
	return &SourceError{Line: n.Line, Err: fieldErr(field, format, args...)}
}

var (
	specCapabilityType = reflect.TypeOf(SpecCapability{})
	capabilityType     = reflect.TypeOf(Capability{})
)

// yamlKind names a node's kind for error messages.
func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return fmt.Sprintf("the text %q", trunc(n.Value))
	case yaml.MappingNode:
		return "a mapping"
	}
	return "empty"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (d *specDecoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	d.nodes++
	if d.nodes > maxSpecNodes {
		return nodeErr(n, path, "the document has more than %d nodes", maxSpecNodes)
	}
	if n.Kind == yaml.AliasNode {
		return nodeErr(n, path, "YAML aliases are not supported")
	}
	t := v.Type()
	if t == rawMessageType {
		if isNull(n) {
			v.SetBytes(nil)
			return nil
		}
		j, err := d.toJSON(n, path)
		if err != nil {
			return err
		}
		b, err := json.Marshal(j)
		if err != nil {
			return nodeErr(n, path, "%v", err)
		}
		v.SetBytes(b)
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return nil
		}
		p := reflect.New(t.Elem())
		if err := d.decode(n, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		if n.Kind == yaml.ScalarNode && !isNull(n) && (t == specCapabilityType || t == capabilityType) {
			// The short form seed 001 writes: a capability by its id alone
			// (capabilities: [org-data-read, user-auth]).
			f := "Name"
			if t == capabilityType {
				f = "ID"
			}
			v.Set(reflect.Zero(t))
			v.FieldByName(f).SetString(n.Value)
			return nil
		}
		if n.Kind != yaml.MappingNode {
			if path == "" {
				return nodeErr(n, path, "this is not an agent description: an AgentSpec is a YAML mapping of members (agent_type: …, version: …, capabilities: …), and this document is %s", yamlKind(n))
			}
			return nodeErr(n, path, "must be a mapping, not %s", yamlKind(n))
		}
		fields := JSONFields(t)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nodeErr(k, path, "member names must be scalars")
			}
			fp := join(path, trunc(k.Value))
			if prev, dup := seen[k.Value]; dup {
				return nodeErr(k, fp, "is repeated (first at line %d)", prev)
			}
			seen[k.Value] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				return nodeErr(k, fp, "unknown field")
			}
			d.lines[fp] = k.Line
			if err := d.decode(val, v.FieldByIndex(f.Index), fp); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return nodeErr(n, path, "must be a list")
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = item.Line
			if err := d.decode(item, s.Index(i), p); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
			return nodeErr(n, path, "unsupported map type %s", t)
		}
		if isNull(n) {
			v.Set(reflect.Zero(t))
			return nil
		}
		if n.Kind != yaml.MappingNode {
			return nodeErr(n, path, "must be a mapping")
		}
		m := reflect.MakeMapWithSize(t, len(n.Content)/2)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nodeErr(k, path, "keys must be scalars")
			}
			fp := join(path, trunc(k.Value))
			if prev, dup := seen[k.Value]; dup {
				return nodeErr(k, fp, "is repeated (first at line %d)", prev)
			}
			seen[k.Value] = k.Line
			d.lines[fp] = k.Line
			if val.Kind != yaml.ScalarNode || isNull(val) {
				return nodeErr(val, fp, "must be a string")
			}
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), reflect.ValueOf(val.Value).Convert(t.Elem()))
		}
		v.Set(m)
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return nodeErr(n, path, "must be a string")
		}
		if isNull(n) {
			v.SetString("")
			return nil
		}
		v.SetString(n.Value)
		return nil
	case reflect.Int64, reflect.Int, reflect.Int32:
		var x int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&x) != nil {
			return nodeErr(n, path, "must be an integer, not %q", trunc(n.Value))
		}
		if v.OverflowInt(x) {
			return nodeErr(n, path, "%d is out of range", x)
		}
		v.SetInt(x)
		return nil
	case reflect.Float64:
		var x float64
		tag := n.ShortTag()
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&x) != nil {
			return nodeErr(n, path, "must be a number, not %q", trunc(n.Value))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nodeErr(n, path, "must be a finite number")
		}
		v.SetFloat(x)
		return nil
	case reflect.Bool:
		var x bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&x) != nil {
			return nodeErr(n, path, "must be true or false, not %q", trunc(n.Value))
		}
		v.SetBool(x)
		return nil
	}
	return nodeErr(n, path, "unsupported type %s", t)
}

// toJSON converts a YAML node into a generic JSON value (schemas).
func (d *specDecoder) toJSON(n *yaml.Node, path string) (any, error) {
	d.nodes++
	if d.nodes > maxSpecNodes {
		return nil, nodeErr(n, path, "the document has more than %d nodes", maxSpecNodes)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nil, nodeErr(n, path, "YAML aliases are not supported")
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, err := d.toJSON(item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, nodeErr(k, path, "keys must be plain scalars (no merge keys)")
			}
			fp := join(path, trunc(k.Value))
			if _, dup := out[k.Value]; dup {
				return nil, nodeErr(k, fp, "is repeated")
			}
			v, err := d.toJSON(val, fp)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, nodeErr(n, path, "%v", err)
			}
			return b, nil
		case "!!int":
			var i int64
			if n.Decode(&i) == nil && i >= -(1<<53) && i <= 1<<53 {
				return i, nil
			}
			fallthrough
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, nodeErr(n, path, "%q is not a number", trunc(n.Value))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, nodeErr(n, path, "must be a finite number")
			}
			return f, nil
		}
		return n.Value, nil
	}
	return nil, nodeErr(n, path, "unsupported YAML node")
}

// Validate checks the spec, naming the offending member.
func (s *AgentSpec) Validate() error {
	if s.AgentType == "" {
		return fieldErr("agent_type", "is required")
	}
	if !ValidIdent(s.AgentType) {
		return fieldErr("agent_type", "%q must match %s and be at most %d bytes", trunc(s.AgentType), identRe, MaxIDLen)
	}
	if err := checkSemver("version", s.Version); err != nil {
		return err
	}
	if len(s.Capabilities) == 0 && len(s.Skills) == 0 {
		return fieldErr("capabilities", "at least one capability (or a skills list) is required")
	}
	if len(s.Capabilities) > MaxCapabilitiesPer {
		return fieldErr("capabilities", "has %d capabilities, more than %d", len(s.Capabilities), MaxCapabilitiesPer)
	}
	seen := map[string]bool{}
	for i, c := range s.Capabilities {
		p := fmt.Sprintf("capabilities[%d]", i)
		if c.Name == "" {
			return fieldErr(p+".name", "is required")
		}
		if !ValidIdent(c.Name) {
			return fieldErr(p+".name", "%q must match %s and be at most %d bytes", trunc(c.Name), identRe, MaxIDLen)
		}
		if seen[c.Name] {
			return fieldErr(p+".name", "duplicate capability %q", c.Name)
		}
		seen[c.Name] = true
		if len(c.Description) > MaxTextLen || !printableText(c.Description) {
			return fieldErr(p+".description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
		}
		if err := validateSchema(p+".input_schema", c.InputSchema); err != nil {
			return err
		}
		if err := validateSchema(p+".output_schema", c.OutputSchema); err != nil {
			return err
		}
		if h := c.ConfidenceHint; h != nil && (math.IsNaN(*h) || *h < 0 || *h > 1) {
			return fieldErr(p+".confidence_hint", "must be between 0 and 1")
		}
	}
	if len(s.NatsSubject) > MaxEndpointLen || !Printable(s.NatsSubject) || strings.ContainsAny(s.NatsSubject, " ;|,") {
		return fieldErr("nats_subject", "must be a NATS subject (no spaces) of at most %d bytes", MaxEndpointLen)
	}
	if s.NatsSubject == "" && s.Endpoint == "" {
		return fieldErr("nats_subject", "nats_subject or endpoint is required: the record needs a transport")
	}
	for _, f := range []struct{ name, v string }{{"consumer_group", s.ConsumerGroup}, {"owner_team", s.OwnerTeam}} {
		if len(f.v) > MaxShortTextLen || !Printable(f.v) {
			return fieldErr(f.name, "must be printable and at most %d bytes", MaxShortTextLen)
		}
	}
	if len(s.SupportedPatterns) > len(specPatterns) {
		return fieldErr("supported_patterns", "has %d entries, there are %d patterns", len(s.SupportedPatterns), len(specPatterns))
	}
	for i, p := range s.SupportedPatterns {
		if !slices.Contains(specPatterns, p) {
			return fieldErr(fmt.Sprintf("supported_patterns[%d]", i), "%q is not one of %s", trunc(p), strings.Join(specPatterns, ", "))
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
		min  int64
	}{{"max_concurrent_tasks", s.MaxConcurrentTasks, 1}, {"task_timeout_ms", s.TaskTimeoutMS, 1000},
		{"llm_timeout_ms", s.LLMTimeoutMS, 1000}, {"max_retries", s.MaxRetries, 0}} {
		if f.v != nil && *f.v < f.min {
			return fieldErr(f.name, "must be at least %d", f.min)
		}
	}
	if r := s.ReflectionConfig; r != nil {
		if r.MaxRounds != nil && (*r.MaxRounds < 1 || *r.MaxRounds > 5) {
			return fieldErr("reflection_config.max_rounds", "must be between 1 and 5")
		}
		if err := checkTextList("reflection_config.criteria", r.Criteria); err != nil {
			return err
		}
		if len(r.Model) > MaxShortTextLen || !Printable(r.Model) {
			return fieldErr("reflection_config.model", "must be printable and at most %d bytes", MaxShortTextLen)
		}
	}
	if err := checkTextList("evaluators", s.Evaluators); err != nil {
		return err
	}
	if err := checkTextList("tools", s.Tools); err != nil {
		return err
	}
	if s.TenantScope != nil && *s.TenantScope != "" && !ValidIdent(*s.TenantScope) {
		return fieldErr("tenant_scope", "must be an identifier of at most %d bytes", MaxIDLen)
	}
	if len(s.Description) > MaxTextLen || !printableText(s.Description) {
		return fieldErr("description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
	}
	if len(s.Tags) > MaxTags {
		return fieldErr("tags", "has %d tags, more than %d", len(s.Tags), MaxTags)
	}
	for k, v := range s.Tags {
		if k == "" || strings.Contains(k, "=") || len(k)+1+len(v) > MaxIDLen || !Printable(k) || !Printable(v) {
			return fieldErr("tags."+trunc(k), "key=value must be printable, at most %d bytes, with a non-empty key without '='", MaxIDLen)
		}
	}
	if _, err := specStatus(s.Status); err != nil {
		return err
	}
	if s.RegisteredAt != "" {
		if _, err := parseSpecTime(s.RegisteredAt); err != nil {
			return fieldErr("registered_at", "%v", err)
		}
	}
	if s.LastHeartbeat != nil && *s.LastHeartbeat != "" {
		if _, err := parseSpecTime(*s.LastHeartbeat); err != nil {
			return fieldErr("last_heartbeat", "%v", err)
		}
	}
	if s.AgentID != "" {
		if err := ValidateAgentID(s.AgentID); err != nil {
			return fieldErr("agent_id", "%v", err)
		}
	}
	if s.AgentName != "" && !isDNSLabel(s.AgentName) {
		return fieldErr("agent_name", "must be a DNS label (1-63 letters, digits or '-', not starting or ending with '-')")
	}
	if s.SkillType != "" && !s.SkillType.Valid() {
		return fieldErr("skill_type", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(string(s.SkillType)))
	}
	if err := checkTextEndpoint("endpoint", s.Endpoint); err != nil {
		return err
	}
	if err := checkIdentList("scenes", s.Scenes, MaxScenesPerSkill); err != nil {
		return err
	}
	if len(s.Skills) > MaxSkills {
		return fieldErr("skills", "has %d skills, more than %d", len(s.Skills), MaxSkills)
	}
	ids := map[string]bool{}
	if len(s.Capabilities) > 0 {
		ids[s.AgentType] = true
	}
	for i := range s.Skills {
		p := fmt.Sprintf("skills[%d]", i)
		if err := s.Skills[i].validate(p); err != nil {
			return err
		}
		if ids[s.Skills[i].SkillID] {
			return fieldErr(p+".skill_id", "duplicate skill_id %q (the capabilities form the skill %q)", s.Skills[i].SkillID, s.AgentType)
		}
		ids[s.Skills[i].SkillID] = true
	}
	return nil
}

func checkTextList(field string, l []string) error {
	if len(l) > maxSpecList {
		return fieldErr(field, "has %d entries, more than %d", len(l), maxSpecList)
	}
	for i, s := range l {
		if s == "" || len(s) > MaxIDLen || !Printable(s) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "must be 1-%d printable bytes", MaxIDLen)
		}
	}
	return nil
}

// specStatus maps the seed-004 lifecycle state to a health status.
func specStatus(s string) (Status, error) {
	switch s {
	case "", SpecRegistered, SpecReady:
		return StatusHealthy, nil
	case SpecDraining:
		return StatusMaintenance, nil
	case SpecDeregistered:
		return "", fieldErr("status", "an agent in state deregistered cannot be registered")
	}
	return "", fieldErr("status", "%q is not one of registered, ready, draining, deregistered", trunc(s))
}

// parseSpecTime accepts RFC 3339 and the zone-less ISO 8601 form Python's
// datetime.isoformat writes (taken as UTC).
func parseSpecTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 timestamp", trunc(s))
}

// ToAgent converts the spec into an unsigned agent record (the signer fills
// the identity fields, see Fill). The mapping:
//
//   - capabilities form one skill: skill_id agent_type, version the spec's
//     version, skill_type the skill_type extension (default tool-skill),
//     endpoint and scenes the extensions of those names, status from the
//     lifecycle state; each capability: id = name, description, schemas,
//     confidence_hint. The skills list, when given, follows it;
//   - status: registered and ready → HEALTHY, draining → MAINTENANCE
//     (applied to the listed skills that have no status of their own when
//     the spec states one), deregistered → an error;
//   - agent_name: the extension, else DNSLabel(agent_type); agent_id: the
//     extension (else left to the signer); version, description,
//     tenant_scope (null → none): as such;
//   - transport: endpoint (type from its URL scheme, "tcp" without one),
//     else {type "nats", endpoint nats_subject};
//   - tags: "key=value", sorted;
//   - metadata: agent_type, and each of nats_subject, consumer_group,
//     supported_patterns, max_concurrent_tasks, task_timeout_ms,
//     llm_timeout_ms, max_retries, reflection_config, evaluators, tools,
//     owner_team, status, registered_at and last_heartbeat that is set.
func (s *AgentSpec) ToAgent() (*Agent, error) {
	if err := s.Validate(); err != nil {
		return nil, s.locate(err)
	}
	status, _ := specStatus(s.Status)
	a := &Agent{
		AgentID:      s.AgentID,
		AgentName:    s.AgentName,
		Capabilities: map[string]string{},
		Description:  s.Description,
		Version:      s.Version,
	}
	if a.AgentName == "" {
		a.AgentName = DNSLabel(s.AgentType)
	}
	if s.TenantScope != nil {
		a.TenantScope = *s.TenantScope
	}
	if s.Endpoint != "" {
		a.Transport = transportFor(s.Endpoint)
	} else {
		a.Transport = Transport{Type: "nats", Endpoint: s.NatsSubject}
	}
	if len(s.Capabilities) > 0 {
		st := s.SkillType
		if st == "" {
			st = SkillTool
		}
		sk := Skill{SkillID: s.AgentType, Version: s.Version, SkillType: st, Endpoint: s.Endpoint,
			Scenes: slices.Clone(s.Scenes), Status: status}
		for _, c := range s.Capabilities {
			cp := Capability{ID: c.Name, Description: c.Description, InputSchema: c.InputSchema, OutputSchema: c.OutputSchema}
			if c.ConfidenceHint != nil {
				cp.ConfidenceHint = f64p(*c.ConfidenceHint)
			}
			sk.Capabilities = append(sk.Capabilities, cp)
		}
		a.Skills = append(a.Skills, sk)
	}
	for _, sk := range s.Skills {
		sk = cloneSkill(sk)
		if sk.Status == "" && s.Status != "" {
			sk.Status = status
		}
		a.Skills = append(a.Skills, sk)
	}
	for k, v := range s.Tags {
		a.Tags = append(a.Tags, k+"="+v)
	}
	slices.Sort(a.Tags)
	meta := map[string]any{MetaAgentType: s.AgentType}
	put := func(k string, v any, set bool) {
		if set {
			meta[k] = v
		}
	}
	put("nats_subject", s.NatsSubject, s.NatsSubject != "")
	put("consumer_group", s.ConsumerGroup, s.ConsumerGroup != "")
	put("supported_patterns", s.SupportedPatterns, s.SupportedPatterns != nil)
	put("max_concurrent_tasks", s.MaxConcurrentTasks, s.MaxConcurrentTasks != nil)
	put("task_timeout_ms", s.TaskTimeoutMS, s.TaskTimeoutMS != nil)
	put("llm_timeout_ms", s.LLMTimeoutMS, s.LLMTimeoutMS != nil)
	put("max_retries", s.MaxRetries, s.MaxRetries != nil)
	put("reflection_config", s.ReflectionConfig, s.ReflectionConfig != nil)
	put("evaluators", s.Evaluators, s.Evaluators != nil)
	put("tools", s.Tools, s.Tools != nil)
	put("owner_team", s.OwnerTeam, s.OwnerTeam != "")
	put("status", s.Status, s.Status != "")
	put("registered_at", s.RegisteredAt, s.RegisteredAt != "")
	put("last_heartbeat", s.LastHeartbeat, s.LastHeartbeat != nil)
	mv, err := jsonValue(meta)
	if err != nil {
		return nil, fieldErr("metadata", "%v", err)
	}
	a.Metadata = mv.(map[string]any)
	a.SyncCapabilities()
	if err := a.ValidateContent(); err != nil {
		return nil, err
	}
	return a, nil
}

func f64p(v float64) *float64 { return &v }

func cloneSkill(s Skill) Skill {
	s.Scenes = slices.Clone(s.Scenes)
	s.Capabilities = slices.Clone(s.Capabilities)
	for i, c := range s.Capabilities {
		if c.ConfidenceHint != nil {
			s.Capabilities[i].ConfidenceHint = f64p(*c.ConfidenceHint)
		}
	}
	return s
}

// MarshalYAMLDoc returns the spec as a document ParseAgentSpec reads back to
// an equal spec. It is JSON, which is YAML.
func (s *AgentSpec) MarshalYAMLDoc() ([]byte, error) {
	return json.MarshalIndent(s, "", "  ")
}
