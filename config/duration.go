package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxDurationText bounds the textual form of a duration, so a hostile file
// cannot make the parser chew on a megabyte of digits.
const maxDurationText = 64

// ParseDuration parses the textual forms a Duration accepts: an integer
// number of milliseconds ("5000", the seed-001 convention) or a Go duration
// string ("5s", "1m30s", "250ms"). Negative values parse; Validate decides
// which fields may hold them.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("is empty; give milliseconds (5000) or a duration (\"5s\")")
	}
	if len(s) > maxDurationText {
		return 0, fmt.Errorf("is %d characters long; a duration has at most %d", len(s), maxDurationText)
	}
	if isInteger(s) {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
			return 0, fmt.Errorf("%s milliseconds is out of range", s)
		}
		return Duration(time.Duration(ms) * time.Millisecond), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither milliseconds (5000) nor a duration (\"5s\")", s)
	}
	return Duration(d), nil
}

func isInteger(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats the duration as a Go duration string ("5s"), which
// ParseDuration reads back to the same value.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads an integer (milliseconds) or a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalarYAML(n, "milliseconds (5000) or a duration (\"5s\")", ParseDuration)
	if err == nil {
		*d = v
	}
	return err
}

// scalarYAML parses the text of an integer or string scalar; want says in
// the error what the value may be.
func scalarYAML[T any](n *yaml.Node, want string, parse func(string) (T, error)) (T, error) {
	var zero T
	if n.Kind != yaml.ScalarNode {
		return zero, errors.New("must be " + want + ", not a " + kindName(n))
	}
	switch n.ShortTag() {
	case "!!int", "!!str":
	default:
		return zero, fmt.Errorf("must be %s, not %s %q", want, tagName(n), clip(n.Value))
	}
	return parse(n.Value)
}

// scalarJSON parses a JSON number or string by its text; what prefixes
// the error.
func scalarJSON[T any](b []byte, what string, parse func(string) (T, error)) (T, error) {
	var zero T
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return zero, err
		}
	}
	v, err := parse(s)
	if err != nil {
		return zero, fmt.Errorf("%s %w", what, err)
	}
	return v, nil
}

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a number (milliseconds) or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := scalarJSON(b, "duration", ParseDuration)
	if err == nil {
		*d = v
	}
	return err
}
