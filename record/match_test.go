package record

import (
	"regexp"
	"strconv"
	"testing"
)

// The regular expressions the hand-written matchers replace.
var versionRe = regexp.MustCompile(`^v(\d{1,4})\.(\d{1,4})$`)

// checkMatchers fails when a matcher and its regexp disagree on s.
func checkMatchers(t *testing.T, s string) {
	t.Helper()
	if got, want := identMatch(s), identRe.MatchString(s); got != want {
		t.Fatalf("identMatch(%q) = %v, identRe says %v", s, got, want)
	}
	if got, want := isDNSLabel(s), dnsLabelRe.MatchString(s); got != want {
		t.Fatalf("isDNSLabel(%q) = %v, dnsLabelRe says %v", s, got, want)
	}
	major, minor, err := ParseVersion(s)
	m := versionRe.FindStringSubmatch(s)
	if (err == nil) != (m != nil) {
		t.Fatalf("ParseVersion(%q): %v; versionRe matched %v", s, err, m != nil)
	}
	if m != nil {
		wantMajor, _ := strconv.Atoi(m[1])
		wantMinor, _ := strconv.Atoi(m[2])
		if major != wantMajor || minor != wantMinor {
			t.Fatalf("ParseVersion(%q) = %d.%d, versionRe says %d.%d", s, major, minor, wantMajor, wantMinor)
		}
	}
}

var matcherSeeds = []string{"", "a", "A9", "-a", "a-", "a-b", "a_b", "a.b/c@d+e-f", "a b", "a:b", "a;b", "a*", "é", "a\n", "a\x00",
	"v1.0", "v1.2", "v0.0", "v9999.9999", "v10000.1", "v1", "v1.", "v.1", "V1.0", "v1.0.0", "v1.0\n", "v١.0", "v-1.0", "v+1.0", "v01.007",
	"0123456789012345678901234567890123456789012345678901234567890123", "012345678901234567890123456789012345678901234567890123456789012"}

func TestMatchersAgreeWithRegexps(t *testing.T) {
	for _, s := range matcherSeeds {
		checkMatchers(t, s)
	}
}

func FuzzMatchers(f *testing.F) {
	for _, s := range matcherSeeds {
		f.Add(s)
	}
	f.Fuzz(checkMatchers)
}

// ParsePublicKeyPEM caches what it parsed: the same text gives the same
// key, another key's text another key, and refused text stays refused.
func TestParsePublicKeyPEMCache(t *testing.T) {
	a, b := newKeys(t), newKeys(t)
	k1, err := ParsePublicKeyPEM(a.pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParsePublicKeyPEM(a.pubPEM)
	if err != nil || k1 != k2 {
		t.Fatalf("second parse: %v, same key %v", err, k1 == k2)
	}
	if !k1.Equal(&a.agent.PublicKey) {
		t.Fatal("cached key is not the agent's")
	}
	kb, err := ParsePublicKeyPEM(b.pubPEM)
	if err != nil || !kb.Equal(&b.agent.PublicKey) || kb.Equal(k1) {
		t.Fatalf("another key: %v", err)
	}
	bad := a.pubPEM[:len(a.pubPEM)-40] + "\n-----END PUBLIC KEY-----\n"
	for range 2 {
		if _, err := ParsePublicKeyPEM(bad); err == nil {
			t.Fatal("a damaged PEM was accepted")
		}
	}
}
