package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testdata"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

type peerIDVectors struct {
	Keys []struct {
		KeyType   string `json:"key_type"`
		PrivHex   string `json:"private_key_protobuf_hex"`
		PubHex    string `json:"public_key_protobuf_hex"`
		Multihash string `json:"derived_peer_id_multihash"`
		Base58    string `json:"derived_peer_id_base58btc"`
		CIDv1     string `json:"derived_peer_id_cidv1_base32"`
	} `json:"keys"`
	Examples []struct {
		Text   string `json:"text"`
		Base58 string `json:"decodes_to_base58btc"`
	} `json:"peer_id_string_examples"`
	Fixtures struct {
		PeerIDs map[string]string `json:"derived_peer_ids"`
	} `json:"go_libp2p_crypto_fixtures"`
}

func loadPeerIDVectors(t *testing.T) peerIDVectors {
	t.Helper()
	b, err := os.ReadFile(testdata.Path(t, "libp2p", "peer-id-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v peerIDVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Keys) != 4 || len(v.Examples) != 3 || len(v.Fixtures.PeerIDs) != 3 {
		t.Fatalf("unexpected vector file shape: %d keys, %d examples, %d fixtures", len(v.Keys), len(v.Examples), len(v.Fixtures.PeerIDs))
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Private key → public key → peer id (base58btc and CIDv1) for every row of
// the libp2p spec vectors, and the peer id agentd derives for its Ed25519
// identity.
func TestPeerIDVectors(t *testing.T) {
	v := loadPeerIDVectors(t)
	for _, row := range v.Keys {
		t.Run(row.KeyType, func(t *testing.T) {
			priv, err := crypto.UnmarshalPrivateKey(unhex(t, row.PrivHex))
			if err != nil {
				t.Fatal(err)
			}
			pub, err := crypto.MarshalPublicKey(priv.GetPublic())
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(pub) != row.PubHex {
				t.Fatalf("public key %x, want %s", pub, row.PubHex)
			}
			pubKey, err := crypto.UnmarshalPublicKey(unhex(t, row.PubHex))
			if err != nil || !pubKey.Equals(priv.GetPublic()) {
				t.Fatalf("public key does not decode to the private key's: %v", err)
			}
			id, err := peer.IDFromPublicKey(pubKey)
			if err != nil {
				t.Fatal(err)
			}
			if id.String() != row.Base58 {
				t.Fatalf("peer id %s, want %s", id, row.Base58)
			}
			if c := peer.ToCid(id).String(); c != row.CIDv1 {
				t.Fatalf("CIDv1 %s, want %s", c, row.CIDv1)
			}
			for _, s := range []string{row.Base58, row.CIDv1} {
				d, err := peer.Decode(s)
				if err != nil || d != id {
					t.Fatalf("peer.Decode(%s) = %s, %v", s, d, err)
				}
			}
			// agentd's record rule: only ids that embed their key can name
			// a record's peer (identity multihash: Ed25519, secp256k1).
			_, err = record.PeerPublicKey(row.Base58)
			if embedded := row.Multihash == "identity"; embedded != (err == nil) {
				t.Fatalf("PeerPublicKey(%s) = %v, multihash %s", row.Base58, err, row.Multihash)
			}
			if row.KeyType == "ED25519" {
				ak, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				ident, err := newIdentity("3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d", ak, priv)
				if err != nil {
					t.Fatal(err)
				}
				if ident.PeerID.String() != row.Base58 {
					t.Fatalf("agentd derives %s, want %s", ident.PeerID, row.Base58)
				}
			}
		})
	}
	for _, ex := range v.Examples {
		id, err := peer.Decode(ex.Text)
		if err != nil || id.String() != ex.Base58 {
			t.Errorf("peer.Decode(%s) = %s, %v; want %s", ex.Text, id, err, ex.Base58)
		}
	}
}

// The go-libp2p key fixtures round-trip byte for byte and their signatures
// verify over message.bin (and fail over a changed message).
func TestLibp2pCryptoFixtures(t *testing.T) {
	v := loadPeerIDVectors(t)
	dir := testdata.Path(t, "libp2p", "go-libp2p-crypto-fixtures")
	msg, err := os.ReadFile(filepath.Join(dir, "message.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"0", "2", "3"} {
		privB, _ := os.ReadFile(filepath.Join(dir, n+".priv"))
		pubB, _ := os.ReadFile(filepath.Join(dir, n+".pub"))
		sig, _ := os.ReadFile(filepath.Join(dir, n+".sig"))
		priv, err := crypto.UnmarshalPrivateKey(privB)
		if err != nil {
			t.Fatalf("%s.priv: %v", n, err)
		}
		if again, _ := crypto.MarshalPrivateKey(priv); !bytes.Equal(again, privB) {
			t.Errorf("%s.priv does not round-trip", n)
		}
		pub, err := crypto.UnmarshalPublicKey(pubB)
		if err != nil {
			t.Fatalf("%s.pub: %v", n, err)
		}
		if again, _ := crypto.MarshalPublicKey(pub); !bytes.Equal(again, pubB) {
			t.Errorf("%s.pub does not round-trip", n)
		}
		if ok, err := pub.Verify(msg, sig); err != nil || !ok {
			t.Errorf("%s.sig does not verify: %v", n, err)
		}
		bad := bytes.Clone(msg)
		bad[0] ^= 1
		if ok, _ := pub.Verify(bad, sig); ok {
			t.Errorf("%s.sig verifies a changed message", n)
		}
		id, err := peer.IDFromPublicKey(pub)
		if err != nil || id.String() != v.Fixtures.PeerIDs[n] {
			t.Errorf("fixture %s: peer id %s, want %s", n, id, v.Fixtures.PeerIDs[n])
		}
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	id, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := record.ValidateAgentID(id.AgentID); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{
		"":           0o700,
		AgentKeyFile: 0o600,
		PeerKeyFile:  0o600,
		AgentPubFile: 0o644,
		AgentIDFile:  0o644,
	} {
		if got := mode(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%q has mode %04o, want %04o", name, got, want)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(dir, AgentPubFile))
	if string(pub) != id.PublicKeyPEM() {
		t.Error("public_key.pem is not the agent key's public half")
	}
	if id.PeerKey.Type() != crypto.Ed25519 {
		t.Errorf("peer key type %v", id.PeerKey.Type())
	}
	if _, err := record.PeerPublicKey(id.PeerID.String()); err != nil {
		t.Errorf("the peer id does not embed its key: %v", err)
	}

	again, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.AgentID != id.AgentID || !again.AgentKey.Equal(id.AgentKey) || !again.PeerKey.Equals(id.PeerKey) || again.PeerID != id.PeerID {
		t.Fatal("reloading gives another identity")
	}

	// public_key.pem is restored from the private key.
	if err := os.WriteFile(filepath.Join(dir, AgentPubFile), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatal(err)
	}
	if pub, _ := os.ReadFile(filepath.Join(dir, AgentPubFile)); string(pub) != id.PublicKeyPEM() {
		t.Error("public_key.pem not rewritten")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("left %s", e.Name())
		}
	}
}

func TestLoadOrCreateRefuses(t *testing.T) {
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		if _, err := LoadOrCreate(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("private key readable by others", func(t *testing.T) {
		dir := setup(t)
		p := filepath.Join(dir, AgentKeyFile)
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreate(dir)
		if err == nil || !strings.Contains(err.Error(), "too open") {
			t.Fatalf("got %v", err)
		}
		if mode(t, p) != 0o644 {
			t.Fatal("the key file was changed")
		}
	})
	t.Run("peer key readable by group", func(t *testing.T) {
		dir := setup(t)
		if err := os.Chmod(filepath.Join(dir, PeerKeyFile), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "too open") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("corrupt agent_id", func(t *testing.T) {
		dir := setup(t)
		p := filepath.Join(dir, AgentIDFile)
		if err := os.WriteFile(p, []byte("agent-001\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), AgentIDFile) {
			t.Fatalf("got %v", err)
		}
		if b, _ := os.ReadFile(p); string(b) != "agent-001\n" {
			t.Fatal("the corrupt agent_id file was overwritten")
		}
	})
	t.Run("corrupt private key", func(t *testing.T) {
		dir := setup(t)
		p := filepath.Join(dir, AgentKeyFile)
		if err := os.WriteFile(p, []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir); err == nil {
			t.Fatal("a corrupt key was accepted (or replaced)")
		}
		if b, _ := os.ReadFile(p); string(b) != "not a key" {
			t.Fatal("the corrupt key was overwritten")
		}
	})
	t.Run("corrupt peer key", func(t *testing.T) {
		dir := setup(t)
		if err := os.WriteFile(filepath.Join(dir, PeerKeyFile), []byte{1, 2, 3}, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir); err == nil {
			t.Fatal("a corrupt peer key was accepted")
		}
	})
}

func TestParseAgentKeyPEM(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pkcs8, err := AgentKeyPEM(k)
	if err != nil {
		t.Fatal(err)
	}
	sec1der, _ := x509.MarshalECPrivateKey(k)
	sec1 := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1der})
	for _, b := range [][]byte{pkcs8, sec1} {
		got, err := ParseAgentKeyPEM(b)
		if err != nil || !got.Equal(k) {
			t.Fatalf("%v", err)
		}
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384der, _ := x509.MarshalPKCS8PrivateKey(p384)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	rsader, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	for name, b := range map[string][]byte{
		"p384":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p384der}),
		"rsa":    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: rsader}),
		"public": []byte(PublicKeyPEM(&k.PublicKey)),
		"empty":  nil,
		"junk":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2}}),
	} {
		if _, err := ParseAgentKeyPEM(b); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestIdentitySign(t *testing.T) {
	id, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	a := &record.Agent{AgentID: id.AgentID, Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "h:1"},
		Seq: 1, IssuedAt: time.Now().UTC().Format(time.RFC3339), TTLSeconds: 60}
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Agent.PeerID != id.PeerID.String() || sa.Agent.PublicKey != id.PublicKeyPEM() {
		t.Fatal("peer_id / public_key not filled")
	}
	if err := sa.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	other, _ := Generate()
	b := *a
	b.PeerID = other.PeerID.String()
	if _, err := id.Sign(&b); !errors.Is(err, record.ErrMalformed) || record.FieldOf(err) != "peer_id" {
		t.Fatalf("signing a record that names another peer: %v", err)
	}
	c := *a
	c.PeerID, c.PublicKey = "", other.PublicKeyPEM()
	if _, err := id.Sign(&c); record.FieldOf(err) != "public_key" {
		t.Fatalf("signing a record that names another agent key: %v", err)
	}
}

// PublicKeyPEM is encoded once per agent key: later calls allocate
// nothing, and a replaced AgentKey gets its own encoding.
func TestIdentityPublicKeyPEMCached(t *testing.T) {
	id, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	want := PublicKeyPEM(&id.AgentKey.PublicKey)
	if got := id.PublicKeyPEM(); got != want {
		t.Fatalf("PublicKeyPEM = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = id.PublicKeyPEM() }); n != 0 {
		t.Fatalf("PublicKeyPEM allocates %.0f times once encoded", n)
	}
	other, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	id.AgentKey = other.AgentKey
	if got := id.PublicKeyPEM(); got != other.PublicKeyPEM() || got == want {
		t.Fatal("PublicKeyPEM kept the encoding of the replaced key")
	}
}
