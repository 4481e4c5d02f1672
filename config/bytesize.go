package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	humanize "github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// ByteSize is a number of bytes, written as an integer (67108864) or with a
// unit ("64MiB", "64MB", "512KiB"; go-humanize's forms, SI and IEC).
type ByteSize uint64

// MaxMinFree bounds storage.minFree (a larger reserve is a typo).
const MaxMinFree ByteSize = 1 << 40

// maxByteSizeText bounds the textual form, as for durations.
const maxByteSizeText = 32

// ParseByteSize parses the forms a ByteSize accepts.
func ParseByteSize(s string) (ByteSize, error) {
	if s == "" {
		return 0, errors.New("is empty; give bytes (67108864) or a size (\"64MiB\")")
	}
	if len(s) > maxByteSizeText {
		return 0, fmt.Errorf("is %d characters long; a size has at most %d", len(s), maxByteSizeText)
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size: give bytes (67108864) or a size with a unit (\"64MiB\", \"500MB\")", clip(s))
	}
	return ByteSize(n), nil
}

// String formats the size with the largest IEC unit that divides it ("64
// MiB", "62500 KiB"), or in bytes; ParseByteSize reads it back exactly.
func (b ByteSize) String() string {
	v := uint64(b)
	if v != 0 {
		// The largest IEC unit that divides the size exactly, so that the
		// text parses back to the same value (go-humanize's IBytes rounds:
		// 64000000 bytes would print as "61 MiB").
		for _, u := range []struct {
			name  string
			shift uint
		}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
			if v%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", v>>u.shift, u.name)
			}
		}
	}
	return fmt.Sprintf("%d", v)
}

// UnmarshalYAML reads an integer or a size string.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalarYAML(n, "bytes (67108864) or a size (\"64MiB\")", ParseByteSize)
	if err == nil {
		*b = v
	}
	return err
}

// MarshalYAML writes the size string.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// MarshalJSON writes the size string.
func (b ByteSize) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads a number of bytes or a size string.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	v, err := scalarJSON(data, "size", ParseByteSize)
	if err == nil {
		*b = v
	}
	return err
}
