package bearer

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const testSecret = "0123456789abcdef0123456789abcdef"

func sign(t *testing.T, tok *jwt.Token) string {
	t.Helper()
	s, err := tok.SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyAcceptsAPlainToken(t *testing.T) {
	v, err := New(testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "me", "scope": ScopeRead,
		"exp": time.Now().Add(time.Hour).Unix()})
	c, err := v.Verify(sign(t, tok))
	if err != nil || !c.Has(ScopeRead) || c.Subject != "me" {
		t.Fatalf("claims %+v, err %v", c, err)
	}
}

// RFC 7515 §4.1.11: a token whose "crit" names an extension the recipient
// does not understand is refused, however well it is signed.
func TestVerifyRefusesCriticalExtensions(t *testing.T) {
	v, err := New(testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, crit := range []any{[]string{"exp"}, []string{"b64"}, []string{}, "x"} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": ScopeRead,
			"exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["crit"] = crit
		tok.Header["b64"] = true
		_, err := v.Verify(sign(t, tok))
		if err == nil || !strings.Contains(err.Error(), "crit") {
			t.Errorf("crit %v: err = %v, want a refusal naming crit", crit, err)
		}
	}
}

// A token has one spelling: a set unused bit in the last character of the
// signature is refused.
func TestVerifyRefusesNonCanonicalBase64(t *testing.T) {
	v, err := New(testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": ScopeRead,
		"exp": time.Now().Add(time.Hour).Unix()}))
	// An HS256 signature is 32 bytes: 43 base64url characters, the last
	// carrying 2 unused bits.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	bad := tok[:len(tok)-1] + string(alphabet[last|1])
	if bad == tok {
		bad = tok[:len(tok)-1] + string(alphabet[last|2])
	}
	if _, err := v.Verify(bad); err == nil {
		t.Fatalf("token with trailing bits set verified: %s", bad)
	}
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
}
