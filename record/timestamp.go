package record

import (
	"errors"
	"strings"
	"time"
)

// errTimestamp is returned for a string that is not an RFC 3339 date-time.
var errTimestamp = errors.New("must be an RFC 3339 date-time (YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm))")

// ParseTimestamp parses an RFC 3339 date-time (§5.6: the schema's
// "date-time") and nothing else. time.Parse(time.RFC3339, …) alone accepts
// more than the RFC — a one-digit hour ("T0:00:00Z"), for one — so a record
// it accepted could fail the schema check of the peer it is forwarded to.
// Every timestamp agentd reads from a record, a rotation statement or a
// WebSocket frame goes through here. Lower-case "t" and "z" are accepted
// (RFC 3339 §5.6 note); a leap second (":60") is refused, as Go's time
// package cannot represent it.
func ParseTimestamp(s string) (time.Time, error) {
	if !rfc3339Shape(s) {
		return time.Time{}, errTimestamp
	}
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
	if err != nil {
		return time.Time{}, errTimestamp
	}
	return t, nil
}

// rfc3339Shape checks the character classes of
// YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm); time.Parse checks the ranges.
func rfc3339Shape(s string) bool {
	const head = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(head)+1 {
		return false
	}
	for i := range len(head) {
		c := s[i]
		switch head[i] {
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case 'T':
			if c != 'T' && c != 't' {
				return false
			}
		default:
			if c != head[i] {
				return false
			}
		}
	}
	rest := s[len(head):]
	if frac, ok := strings.CutPrefix(rest, "."); ok {
		n := 0
		for n < len(frac) && frac[n] >= '0' && frac[n] <= '9' {
			n++
		}
		if n == 0 {
			return false
		}
		rest = frac[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		return isDigits(rest[1:3]) && isDigits(rest[4:6])
	}
	return false
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
