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
	if n.Kind != yaml.ScalarNode {
		return errors.New("must be milliseconds (5000) or a duration (\"5s\"), not a " + kindName(n))
	}
	switch n.ShortTag() {
	case "!!int", "!!str":
	default:
		return fmt.Errorf("must be milliseconds (5000) or a duration (\"5s\"), not %s %q", tagName(n), clip(n.Value))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a number (milliseconds) or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	} else {
		s = string(b)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %w", err)
	}
	*d = v
	return nil
}
