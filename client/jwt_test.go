package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
)

// hs256 builds an HS256 JWT by hand (the client does not depend on a JWT
// library; tokens come from whoever runs the daemon).
func hs256(t *testing.T, secret, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(m.Sum(nil))
}
