package config

import "testing"

// A size prints in the largest IEC unit that divides it and parses back
// to the same value (go-humanize's IBytes rounded 64000000 to "61 MiB";
// found by FuzzParse, corpus entry cb3c9cfbc1b26e53).
func TestByteSizeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		v    ByteSize
		text string
	}{
		{0, "0"}, {1, "1"}, {1023, "1023"}, {1024, "1 KiB"}, {64 << 20, "64 MiB"},
		{64_000_000, "62500 KiB"}, {3 << 30, "3 GiB"}, {1 << 40, "1 TiB"}, {1<<40 + 1024, "1073741825 KiB"},
	} {
		if got := c.v.String(); got != c.text {
			t.Errorf("%d prints %q, want %q", uint64(c.v), got, c.text)
		}
		back, err := ParseByteSize(c.text)
		if c.v == 0 {
			continue // "0" is not a size string a user gives; 0 is written as a number
		}
		if err != nil || back != c.v {
			t.Errorf("%q parses to %d, %v; want %d", c.text, uint64(back), err, uint64(c.v))
		}
	}
}
