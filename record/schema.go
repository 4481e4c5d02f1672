package record

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	schemakind "github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The JSON Schemas (draft-07) of the seed-000 messages and of the agent
// object, embedded. Seed 000 §4.1 refers to #/definitions/AgentObject without
// defining it; schema/agent.json is that definition.
//
//go:embed schema/*.json
var schemaFS embed.FS

// SchemaBaseURI is the base of the $id of every embedded schema.
const SchemaBaseURI = "https://github.com/agentd/agentd/record/schema/"

// Schema kinds accepted by ValidateSchema and SchemaJSON.
const (
	SchemaAnnounce = "announce"
	SchemaQuery    = "query"
	SchemaResponse = "response"
	SchemaAgent    = "agent"
)

// ErrUnknownSchema is returned by ValidateSchema and SchemaJSON for a kind
// that is not one of the Schema* constants.
var ErrUnknownSchema = errors.New("unknown schema kind")

var (
	schemaOnce     sync.Once
	schemaCompiled map[string]*jsonschema.Schema
	schemaInitErr  error
	schemaPrinter  = message.NewPrinter(language.English)
)

// noLoader refuses to fetch anything: every schema is embedded.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not embedded (remote schemas are never fetched)", url)
}

func compileSchemas() (map[string]*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft7)
		c.AssertFormat()
		c.UseLoader(noLoader{})
		for _, k := range SchemaKinds() {
			b, err := schemaFS.ReadFile("schema/" + k + ".json")
			if err != nil {
				schemaInitErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				schemaInitErr = fmt.Errorf("schema %s: %w", k, err)
				return
			}
			if err := c.AddResource(SchemaBaseURI+k+".json", doc); err != nil {
				schemaInitErr = fmt.Errorf("schema %s: %w", k, err)
				return
			}
		}
		m := map[string]*jsonschema.Schema{}
		for _, k := range SchemaKinds() {
			s, err := c.Compile(SchemaBaseURI + k + ".json")
			if err != nil {
				schemaInitErr = fmt.Errorf("compile schema %s: %w", k, err)
				return
			}
			m[k] = s
		}
		schemaCompiled = m
	})
	return schemaCompiled, schemaInitErr
}

// SchemaKinds returns the kinds of the embedded schemas.
func SchemaKinds() []string {
	return []string{SchemaAgent, SchemaAnnounce, SchemaQuery, SchemaResponse}
}

// SchemaJSON returns the embedded schema document of a kind, for serving it
// (e.g. from the local API) or publishing it.
func SchemaJSON(kind string) ([]byte, error) {
	for _, k := range SchemaKinds() {
		if k == kind {
			return schemaFS.ReadFile("schema/" + k + ".json")
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownSchema, trunc(kind))
}

// ValidateSchema validates a JSON document against the embedded schema of a
// kind: "announce", "query", "response" or "agent". A document that does not
// conform gives a *FieldError naming the offending member (e.g.
// "agent.skills[0].skill_type"), which wraps ErrMalformed. Schema validation
// is the interoperability floor of seed 000; agentd's own checks (Validate,
// the Parse functions) are stricter.
func ValidateSchema(kind string, doc []byte) error {
	schemas, err := compileSchemas()
	if err != nil {
		return err
	}
	s, ok := schemas[kind]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownSchema, trunc(kind))
	}
	if len(doc) > MaxMessageBytes {
		return fmt.Errorf("%w: document is %d bytes, limit %d", ErrTooLarge, len(doc), MaxMessageBytes)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return &FieldError{Field: "", Reason: fmt.Sprintf("invalid JSON: %v", err)}
	}
	err = s.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	leaf := firstLeaf(ve)
	field := pointerToField(leaf.InstanceLocation)
	if req, ok := leaf.ErrorKind.(*schemakind.Required); ok && len(req.Missing) > 0 {
		missing := append([]string(nil), req.Missing...)
		sort.Strings(missing)
		field = join(field, missing[0])
		return &FieldError{Field: field, Reason: "is required by the " + kind + " schema"}
	}
	return &FieldError{Field: field, Reason: leaf.ErrorKind.LocalizedString(schemaPrinter) + " (" + kind + " schema)"}
}

// firstLeaf descends to the first most specific cause.
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// pointerToField renders JSON pointer tokens as a field path: object members
// joined by '.', array indexes (all-digit tokens) as [n].
func pointerToField(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if t != "" && strings.Trim(t, "0123456789") == "" {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(trunc(t))
	}
	return b.String()
}
