package record

import "testing"

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"},            // é is 2 bytes: never cut inside a rune
		{"a\xffb", 64, "a\uFFFDb"}, // invalid bytes become U+FFFD
	} {
		if got := Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for s, want := range map[string]bool{"skill-a 1.0": true, "é": true, "a\nb": false, "a\x7f": false, "\xff": false, "": true} {
		if Printable(s) != want {
			t.Errorf("Printable(%q) = %v", s, !want)
		}
	}
}
