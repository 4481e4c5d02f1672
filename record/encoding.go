package record

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// Every signature, key and digest agentd reads has exactly one accepted
// encoding. A second encoding of the same bytes would verify under a new
// message id: gossip would forward it again, caches would store it twice and
// a test that flips one bit of a signature would pass now and then. So:
//
//   - base64 is the padded standard alphabet of RFC 4648 §4, decoded
//     strictly: no line breaks, no missing or extra padding, and the unused
//     bits of the last character must be zero (DecodeBase64);
//   - an ECDSA signature is ASN.1 DER with minimal integers and nothing
//     after the SEQUENCE, and its s is in the lower half of the group order
//     ("low-S", as Bitcoin's BIP 62 and libsecp256k1 require): for every
//     valid (r, s) the pair (r, n-s) verifies too, so only one of the two
//     is accepted (VerifyBytes), and agentd's signer always emits it
//     (SignBytes).
//
// One exception: the seed-001 UDP messages (SkillMessage.Verify) accept a
// high S too. Their senders are SHA256withECDSA signers of other
// implementations, and Java's, for one, does not normalise S; refusing it
// would drop half of their messages. Nothing there is keyed by the signature
// bytes (replays are refused by timestamp), so the second form gains an
// attacker nothing. The DER and the base64 must still be canonical.
//
// Ed25519 (the peer key) needs nothing here: crypto/ed25519 already refuses
// a non-canonical s.

// errBase64 is returned for a string that is not canonical padded base64.
var errBase64 = errors.New("not canonical base64 (RFC 4648 §4, padded, no line breaks, zero trailing bits)")

// DecodeBase64 decodes the padded standard base64 of RFC 4648 §4 and accepts
// exactly one spelling of each byte string: it refuses CR and LF (which
// encoding/base64 skips even in strict mode), missing padding and non-zero
// trailing bits.
func DecodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errBase64
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, errBase64
	}
	return b, nil
}

// parseDERSignature parses an ECDSA signature and reports whether it is the
// one canonical DER encoding of a low-S signature for curve c.
func parseDERSignature(c elliptic.Curve, sig []byte) (r, s *big.Int, ok bool) {
	return parseDER(c, sig, false)
}

func parseDER(c elliptic.Curve, sig []byte, allowHighS bool) (r, s *big.Int, ok bool) {
	var inner cryptobyte.String
	in := cryptobyte.String(sig)
	r, s = new(big.Int), new(big.Int)
	// cryptobyte refuses long-form lengths that fit the short form and
	// integers with superfluous leading bytes, i.e. it accepts DER only.
	if !in.ReadASN1(&inner, asn1.SEQUENCE) || !in.Empty() ||
		!inner.ReadASN1Integer(r) || !inner.ReadASN1Integer(s) || !inner.Empty() {
		return nil, nil, false
	}
	n := c.Params().N
	if r.Sign() <= 0 || s.Sign() <= 0 || r.Cmp(n) >= 0 {
		return nil, nil, false
	}
	if s.Cmp(n) >= 0 || (!allowHighS && s.Cmp(halfOrder(c)) > 0) {
		return nil, nil, false
	}
	return r, s, true
}

func halfOrder(c elliptic.Curve) *big.Int {
	return new(big.Int).Rsh(c.Params().N, 1)
}

// marshalDERSignature encodes (r, s) as an ASN.1 DER SEQUENCE of two
// INTEGERs.
func marshalDERSignature(r, s *big.Int) ([]byte, error) {
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1BigInt(r)
		b.AddASN1BigInt(s)
	})
	return b.Bytes()
}

// lowS rewrites a DER signature from ecdsa.SignASN1 into its low-S form
// (s > n/2 becomes n-s, which verifies for the same message and key).
func lowS(pub *ecdsa.PublicKey, sig []byte) ([]byte, error) {
	var inner cryptobyte.String
	in := cryptobyte.String(sig)
	r, s := new(big.Int), new(big.Int)
	if !in.ReadASN1(&inner, asn1.SEQUENCE) || !inner.ReadASN1Integer(r) || !inner.ReadASN1Integer(s) {
		return nil, errors.New("ecdsa: signer returned a malformed signature")
	}
	if s.Cmp(halfOrder(pub.Curve)) <= 0 {
		return sig, nil
	}
	return marshalDERSignature(r, new(big.Int).Sub(pub.Curve.Params().N, s))
}

// verifyBytesAnyS is VerifyBytes for the seed-001 UDP messages: canonical
// DER, either S.
func verifyBytesAnyS(pub *ecdsa.PublicKey, msg, sig []byte) bool {
	if _, _, ok := parseDER(pub.Curve, sig, true); !ok {
		return false
	}
	h := sha256.Sum256(msg)
	return ecdsa.VerifyASN1(pub, h[:], sig)
}
