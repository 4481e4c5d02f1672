package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Redacted is what Print shows in place of a secret.
const Redacted = "<redacted>"

// Redacted returns a copy of c with the secrets (api.jwtSecret,
// discovery.udp.hmacKey, registry.token) replaced by Redacted, so the
// configuration can be shown or logged.
func (c Config) Redacted() Config {
	r := c
	r.Listen = append([]string(nil), c.Listen...)
	redact := func(s *string) {
		if *s != "" {
			*s = Redacted
		}
	}
	redact(&r.API.JWTSecret)
	redact(&r.Discovery.UDP.HMACKey)
	redact(&r.Registry.Token)
	return r
}

// YAML renders c as a YAML document that Parse reads back to the same
// configuration (durations as Go duration strings). A nil Listen (use the
// default addresses) is left out, while an empty one (listen nowhere) is
// written as []. Secrets are included: use Redacted first to show it.
func (c Config) YAML() ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	if c.Listen == nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "listen" {
				n.Content = append(n.Content[:i], n.Content[i+2:]...)
				break
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// JSON renders c as indented JSON with the same keys as the YAML form.
func (c Config) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// ExpandHome replaces a leading "~" (alone or followed by a slash) in p with
// the user's home directory ($HOME). Other paths are returned unchanged;
// "~user" forms are refused.
func ExpandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		if strings.HasPrefix(p, "~") {
			return "", fmt.Errorf("%q: only ~ and ~/ are expanded, not ~user", clip(p))
		}
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("cannot expand ~: $HOME is not set; give an absolute data directory")
	}
	return filepath.Join(home, p[1:]), nil
}
