package record

import (
	"strings"
	"unicode/utf8"
)

// Truncate shortens s to at most n bytes, cut at a rune boundary and
// marked with "…", for quoting untrusted input in an error message; bytes
// that are not UTF-8 become U+FFFD, so the message stays valid text.
func Truncate(s string, n int) string {
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Printable reports whether s is valid UTF-8 without control characters
// (C0 and DEL).
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
