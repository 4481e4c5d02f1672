package dht

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fixedPeer derives a peer id from a fixed Ed25519 seed.
func fixedPeer(t testing.TB, seed byte) (peer.ID, crypto.PrivKey) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id, k
}

func TestFrameGoldenBytes(t *testing.T) {
	var buf bytes.Buffer
	body := []byte(`{"protocol_version":"v1.0","nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","skill":"s"}`)
	if err := WriteFrame(&buf, body); err != nil {
		t.Fatal(err)
	}
	// 94 bytes of body: a one-byte varint 0x5e.
	if got := hex.EncodeToString(buf.Bytes()[:1]); got != "5e" || !bytes.Equal(buf.Bytes()[1:], body) {
		t.Fatalf("frame = %x", buf.Bytes())
	}
	big := bytes.Repeat([]byte("x"), 300)
	buf.Reset()
	_ = WriteFrame(&buf, big)
	if got := hex.EncodeToString(buf.Bytes()[:2]); got != "ac02" { // 300 = 0b10_0101100
		t.Fatalf("prefix of 300 = %s, want ac02", got)
	}
	got, err := ReadFrame(&buf, 300)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("round trip: %v", err)
	}
}

func TestReadFrameRefusesBadPrefixes(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []byte
		want error
	}{
		"oversized prefix": {[]byte{0xff, 0xff, 0xff, 0x7f}, ErrFrameTooLarge},
		"one over limit":   {append([]byte{0x81, 0x08}, make([]byte, 1025)...), ErrFrameTooLarge}, // 1025 > 1024
		"non-minimal":      {[]byte{0x80, 0x00}, ErrProtocol},
		"overflow":         {bytes.Repeat([]byte{0xff}, 12), ErrProtocol},
		"empty":            {nil, ErrProtocol},
		"truncated body":   {[]byte{0x05, 'a', 'b'}, ErrProtocol},
		"truncated varint": {[]byte{0x80}, ErrProtocol},
	} {
		_, err := ReadFrame(bytes.NewReader(tc.in), 1024)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	// An oversized prefix is refused without reading the body.
	r := &countingReader{r: io.MultiReader(bytes.NewReader([]byte{0xff, 0xff, 0x03}), neverEnding{})}
	if _, err := ReadFrame(r, MaxRequestBytes); !errors.Is(err, ErrFrameTooLarge) || r.n != 3 {
		t.Fatalf("read %d bytes, err %v", r.n, err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type neverEnding struct{}

func (neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestParseRequestNamesTheField(t *testing.T) {
	nonce := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for name, tc := range map[string]struct{ in, field string }{
		"short nonce": {`{"protocol_version":"v1.0","nonce":"AAAA"}`, "nonce"},
		"bad base64":  {`{"protocol_version":"v1.0","nonce":"!!"}`, "nonce"},
		"bad skill":   {`{"protocol_version":"v1.0","nonce":"` + nonce + `","skill":"a b"}`, "skill"},
		"bad cap":     {`{"protocol_version":"v1.0","nonce":"` + nonce + `","capability":"x:y"}`, "capability"},
		"bad agent":   {`{"protocol_version":"v1.0","nonce":"` + nonce + `","agent_id":"nope"}`, "agent_id"},
		"bad version": {`{"protocol_version":"1.0","nonce":"` + nonce + `"}`, "protocol_version"},
	} {
		_, _, err := ParseRequest([]byte(tc.in))
		if record.FieldOf(err) != tc.field {
			t.Errorf("%s: err %v, want field %s", name, err, tc.field)
		}
	}
	if _, _, err := ParseRequest([]byte(`{"protocol_version":"v2.0","nonce":"` + nonce + `"}`)); !errors.Is(err, record.ErrUnsupportedVersion) {
		t.Errorf("v2.0: %v", err)
	}
	for _, in := range []string{`[]`, `{"protocol_version":"v1.0","nonce":"` + nonce + `"} {}`, `{`, ``} {
		if _, _, err := ParseRequest([]byte(in)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v", in, err)
		}
	}
	// A newer minor version and unknown members are accepted.
	r, n, err := ParseRequest([]byte(`{"protocol_version":"v1.3","nonce":"` + nonce + `","future":1,"skill":"s"}`))
	if err != nil || len(n) != 32 || r.Skill != "s" {
		t.Fatalf("forward-compatible request refused: %v", err)
	}
}

func TestParseResponseStructure(t *testing.T) {
	sig := base64.StdEncoding.EncodeToString([]byte{1, 2, 3})
	rec := `{"announce":{},"signer":"agent","challenge_signature":"` + sig + `"}`
	many := strings.TrimSuffix(strings.Repeat(rec+",", 17), ",")
	for name, in := range map[string]string{
		"too many":    `{"protocol_version":"v1.0","records":[` + many + `]}`,
		"bad signer":  `{"protocol_version":"v1.0","records":[{"announce":{},"signer":"root","challenge_signature":"` + sig + `"}]}`,
		"no sig":      `{"protocol_version":"v1.0","records":[{"announce":{},"signer":"peer","challenge_signature":""}]}`,
		"not object":  `{"protocol_version":"v1.0","records":[{"announce":"x","signer":"peer","challenge_signature":"` + sig + `"}]}`,
		"empty code":  `{"protocol_version":"v1.0","records":[],"error":{"code":"","message":"m"}}`,
		"not json":    `{"protocol_version":"v1.0",`,
		"bad version": `{"protocol_version":"x","records":[]}`,
	} {
		if _, err := ParseResponse([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r, err := ParseResponse([]byte(`{"protocol_version":"v1.0","records":[` + rec + `],"error":{"code":"ErrRateLimited","message":"slow down"}}`))
	if err != nil || len(r.Records) != 1 || r.Error.Code != "ErrRateLimited" {
		t.Fatalf("valid response: %+v %v", r, err)
	}
}

func TestChallengeBytesGolden(t *testing.T) {
	req, _ := fixedPeer(t, 1)
	resp, _ := fixedPeer(t, 2)
	nonce := bytes.Repeat([]byte{0xaa}, NonceSize)
	canon := []byte(`{"agent_id":"x"}`)
	got := ChallengeBytes(nonce, req, resp, canon)
	h := sha256.Sum256(canon)
	want := append(append(append(append([]byte(ChallengeDomain), nonce...), []byte(req)...), []byte(resp)...), h[:]...)
	if !bytes.Equal(got, want) {
		t.Fatal("challenge layout changed")
	}
	// Ed25519 peer ids are 38-byte identity multihashes: 27 + 32 + 38 + 38 + 32.
	if len(got) != 167 {
		t.Fatalf("challenge is %d bytes, want 167", len(got))
	}
	sum := sha256.Sum256(got)
	const golden = "3397d4e973ab9e36aee1e226e06c200ab0b215bf927ff276d24e8ec0d76e53b9"
	if hex.EncodeToString(sum[:]) != golden {
		t.Fatalf("challenge digest %x changed (req %s, resp %s)", sum, req, resp)
	}
	// Any change of nonce, requester, responder or record changes it.
	other, _ := fixedPeer(t, 3)
	for _, alt := range [][]byte{
		ChallengeBytes(bytes.Repeat([]byte{0xab}, NonceSize), req, resp, canon),
		ChallengeBytes(nonce, other, resp, canon),
		ChallengeBytes(nonce, req, other, canon),
		ChallengeBytes(nonce, resp, req, canon),
		ChallengeBytes(nonce, req, resp, []byte(`{"agent_id":"y"}`)),
	} {
		if bytes.Equal(alt, got) {
			t.Fatal("challenge does not bind every input")
		}
	}
}

func TestValidator(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testValidator(t, Validator{}) })
	// With the cache of verified values, every verdict is the same, each
	// value checked twice (the second time from the cache).
	t.Run("cached", func(t *testing.T) {
		v := Validator{Verified: NewVerifiedCache()}
		testValidator(t, v)
		testValidator(t, v)
	})
}

// A value that verified once is still refused once its validity window
// has passed: the cache holds the signature check, not the verdict.
func TestVerifiedCacheRechecksTheWindow(t *testing.T) {
	id := mustIdentity(t)
	sa := signedAgent(t, id, 5, skillSpec{"skill-v": {"cap-v"}})
	now := time.Now()
	v := Validator{Verified: NewVerifiedCache(), Now: func() time.Time { return now }}
	key := ValueKey(id.AgentID)
	if err := v.Validate(key, sa.MarshalAnnounce()); err != nil {
		t.Fatal(err)
	}
	now = sa.Agent.ExpiresAt().Add(time.Second)
	if err := v.Validate(key, sa.MarshalAnnounce()); record.FieldOf(err) != "ttl_seconds" {
		t.Fatalf("an expired value from the cache: %v", err)
	}
}

func testValidator(t *testing.T, v Validator) {
	id := mustIdentity(t)
	sa := signedAgent(t, id, 5, skillSpec{"skill-v": {"cap-v"}})
	val := sa.MarshalAnnounce()
	byAgent, byPeer := ValueKey(id.AgentID), ValueKey(id.PeerID.String())
	for _, k := range []string{byAgent, byPeer} {
		if err := v.Validate(k, val); err != nil {
			t.Fatalf("Validate(%s): %v", k, err)
		}
	}
	other := mustIdentity(t)
	forged := sa.Clone()
	forged.PeerSignature = append([]byte{}, sa.PeerSignature...)
	forged.PeerSignature[3] ^= 1
	unsigned := sa.Clone()
	unsigned.PeerSignature = nil
	expired := func() []byte {
		a := sa.Agent
		a.IssuedAt = time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
		a.TTLSeconds = 60
		s, err := id.Sign(&a)
		if err != nil {
			t.Fatal(err)
		}
		return s.MarshalAnnounce()
	}()
	future := func() []byte {
		a := sa.Agent
		a.IssuedAt = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		s, err := id.Sign(&a)
		if err != nil {
			t.Fatal(err)
		}
		return s.MarshalAnnounce()
	}()
	for name, tc := range map[string]struct {
		key  string
		val  []byte
		want error
	}{
		"other agent key":    {ValueKey(other.AgentID), val, ErrBadKey},
		"other peer key":     {ValueKey(other.PeerID.String()), val, ErrBadKey},
		"wrong namespace":    {"/skill/" + id.AgentID, val, ErrBadKey},
		"no namespace":       {id.AgentID, val, ErrBadKey},
		"garbage rest":       {"/agentd/hello", val, ErrBadKey},
		"peer id as CID":     {ValueKey(peer.ToCid(id.PeerID).String()), val, ErrBadKey},
		"bad peer signature": {byAgent, forged.MarshalAnnounce(), record.ErrBadPeerSignature},
		"no peer signature":  {byAgent, unsigned.MarshalAnnounce(), record.ErrUnsigned},
		"expired":            {byAgent, expired, record.ErrMalformed},
		"issued in future":   {byAgent, future, record.ErrMalformed},
		"not json":           {byAgent, []byte("{"), record.ErrMalformed},
		"too large":          {byAgent, bytes.Repeat([]byte(" "), record.MaxMessageBytes+1), record.ErrTooLarge},
	} {
		if err := v.Validate(tc.key, tc.val); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	// Select: highest seq wins, invalid values are skipped, ties go to
	// the first (kad-dht calls Select([incoming, existing]) on store).
	newer := signedAgent(t, id, 6, skillSpec{"skill-v": {"cap-v"}}).MarshalAnnounce()
	sameSeq := signedAgent(t, id, 5, skillSpec{"skill-v": {"cap-w"}}).MarshalAnnounce()
	for name, tc := range map[string]struct {
		vals [][]byte
		want int
	}{
		"newer second":     {[][]byte{val, newer}, 1},
		"newer first":      {[][]byte{newer, val}, 0},
		"identical tie":    {[][]byte{val, val}, 0},
		"same seq tie":     {[][]byte{sameSeq, val}, 0},
		"same seq tie rev": {[][]byte{val, sameSeq}, 0},
		"invalid skipped":  {[][]byte{forged.MarshalAnnounce(), val}, 1},
		"invalid newer":    {[][]byte{val, expired, []byte("x")}, 0},
	} {
		got, err := v.Select(byAgent, tc.vals)
		if err != nil || got != tc.want {
			t.Errorf("Select %s = %d, %v; want %d", name, got, err, tc.want)
		}
	}
	if _, err := v.Select(byAgent, [][]byte{[]byte("x"), expired}); !errors.Is(err, ErrNoValidValue) {
		t.Errorf("Select of invalid values: %v", err)
	}
	// The announce is what travels: check it is plain JSON with the record.
	var ann record.Announce
	if err := json.Unmarshal(val, &ann); err != nil || ann.PeerSignature == "" || ann.Signature == "" {
		t.Fatalf("value is not an Announce: %v", err)
	}
}
