package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits on a configuration file. A file is operator input, but it may come
// from a configuration-management system or a container image the operator
// did not read, so it is parsed as hostile input.
const (
	// MaxFileBytes bounds a configuration file.
	MaxFileBytes = 1 << 20
	// MaxListLen bounds every list (listen, allowList, bootstrapNodes, …).
	MaxListLen = 1024
	// maxAliasHops bounds alias chains while walking the document.
	maxAliasHops = 16
)

// Load reads the YAML configuration file at path over Default(), validates
// the result and returns it. Unknown keys, values of the wrong type and
// values out of bounds are errors; each names the file, the line and the
// dotted field (see FieldError), and errors.Is(err, ErrInvalid) holds for
// them. Keys that are absent, or present with an empty value, keep their
// defaults. The seed-001 configuration reference (§13.2) is a valid file.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open configuration: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("read configuration %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return Config{}, &FieldError{File: path, Reason: fmt.Sprintf("is larger than %d bytes, the limit for a configuration file", MaxFileBytes)}
	}
	return Parse(path, data)
}

// Parse is Load for data already read; name is used in error messages.
func Parse(name string, data []byte) (Config, error) {
	c := Default()
	lines, err := decode(name, data, &c)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, locate(name, lines, err)
	}
	return c, nil
}

// locate adds the file name and, where the field (or its nearest parent)
// appears in the file, the line to every FieldError in err.
func locate(name string, lines map[string]int, err error) error {
	fes := FieldErrors(err)
	if len(fes) == 0 {
		return err
	}
	out := make([]error, 0, len(fes))
	for _, fe := range fes {
		c := *fe
		c.File = name
		c.Line = lineOf(lines, fe.Field)
		out = append(out, &c)
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// lineOf returns the line of path or of its nearest ancestor in the file.
func lineOf(lines map[string]int, path string) int {
	for path != "" {
		if l, ok := lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode walks the YAML document onto c and returns the line of every field
// path it set.
func decode(name string, data []byte, c *Config) (map[string]int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]int{}, nil // empty file: all defaults
		}
		return nil, syntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, syntaxError(name, err)
		}
		return nil, &FieldError{File: name, Line: extra.Line, Reason: "holds a second YAML document; a configuration file holds one"}
	}
	d := &decoder{file: name, lines: map[string]int{}}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return d.lines, nil
		}
		root = root.Content[0]
	}
	if err := d.value("", root, reflect.ValueOf(c).Elem()); err != nil {
		return nil, err
	}
	return d.lines, nil
}

func syntaxError(name string, err error) error {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{File: name, Line: line, Reason: "YAML syntax: " + m[2]}
	}
	return &FieldError{File: name, Reason: "YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

type decoder struct {
	file  string
	lines map[string]int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) error {
	return &FieldError{File: d.file, Line: n.Line, Field: path, Reason: fmt.Sprintf(format, args...)}
}

// scalarValue is implemented by the configuration's own scalar types
// (Duration, ByteSize), which parse their text themselves.
type scalarValue interface{ UnmarshalYAML(*yaml.Node) error }

// value decodes n into v, which is addressable.
func (d *decoder) value(path string, n *yaml.Node, v reflect.Value) error {
	for hops := 0; n.Kind == yaml.AliasNode; hops++ {
		if hops >= maxAliasHops || n.Alias == nil {
			return d.fail(n, path, "alias chain is too long")
		}
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // an empty value keeps the default
	}
	if u, ok := v.Addr().Interface().(scalarValue); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			return d.fail(n, path, "%s", err.Error())
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.mapping(path, n, v)
	case reflect.Slice:
		return d.sequence(path, n, v)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.fail(n, path, "must be a string, not a %s", kindName(n))
		}
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float", "!!bool":
			v.SetString(n.Value)
			return nil
		}
		return d.fail(n, path, "must be a string, not %s", tagName(n))
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return d.fail(n, path, "must be true or false, not %s", describe(n))
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return d.fail(n, path, "must be true or false, not %s", describe(n))
		}
		v.SetBool(b)
		return nil
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return d.fail(n, path, "must be an integer, not %s", describe(n))
		}
		var i int
		if err := n.Decode(&i); err != nil {
			return d.fail(n, path, "%s is not an integer that fits in 64 bits", clip(n.Value))
		}
		v.SetInt(int64(i))
		return nil
	}
	return d.fail(n, path, "cannot be set from a file (unsupported type %s)", v.Type())
}

func (d *decoder) mapping(path string, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return d.fail(n, path, "must be a mapping of keys to values, not %s", describe(n))
	}
	fields := yamlFields(v.Type())
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			return d.fail(k, path, "merge keys and non-scalar keys are not supported; write the keys out")
		}
		key := k.Value
		kp := key
		if path != "" {
			kp = path + "." + key
		}
		if first, dup := seen[key]; dup {
			return d.fail(k, kp, "is given twice (first on line %d)", first)
		}
		seen[key] = k.Line
		idx, ok := fields[key]
		if !ok {
			return d.fail(k, kp, "unknown key; %s", knownKeys(fields, path))
		}
		d.lines[kp] = k.Line
		if err := d.value(kp, val, v.Field(idx)); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) sequence(path string, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.SequenceNode {
		return d.fail(n, path, "must be a list, not %s", describe(n))
	}
	if len(n.Content) > MaxListLen {
		return d.fail(n, path, "has %d entries; the limit is %d", len(n.Content), MaxListLen)
	}
	if len(n.Content) == 0 && path != "listen" {
		// An empty list is the same as no list, except for listen, where
		// nil means the default addresses and [] means listen nowhere.
		v.Set(reflect.Zero(v.Type()))
		return nil
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.lines[ip] = item.Line
		if err := d.value(ip, item, s.Index(i)); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

// yamlFields maps the yaml key of every exported field of t to its index.
func yamlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = i
	}
	return m
}

func knownKeys(fields map[string]int, path string) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	where := "here"
	if path != "" {
		where = "under " + path
	}
	return fmt.Sprintf("the keys %s are: %s", where, strings.Join(keys, ", "))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	case yaml.DocumentNode:
		return "document"
	}
	return "scalar"
}

func tagName(n *yaml.Node) string {
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number with a fraction"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!timestamp":
		return "a timestamp"
	case "!!binary":
		return "binary data"
	}
	return "a value tagged " + clip(n.ShortTag())
}

// describe names a node for an error message: its kind, or its type and text.
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "a " + kindName(n)
	}
	return fmt.Sprintf("%s %q", tagName(n), clip(n.Value))
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
