package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// File names inside the data directory.
const (
	AgentKeyFile  = "private_key.pem"   // ECDSA P-256 agent key, PKCS#8 PEM, mode 0600 (seed 000 §6.1)
	AgentPubFile  = "public_key.pem"    // its public half, PKIX PEM
	PeerKeyFile   = "peer_key"          // Ed25519 libp2p identity, protobuf-encoded, mode 0600
	AgentIDFile   = "agent_id"          // the UUIDv4 created on first run
	CertFile      = "certificate.pem"   // optional: the agent's certificate bundle (leaf first, then intermediates)
	RotationFile  = "key_rotation.json" // optional: the statement of the last key rotation (record.KeyRotation)
	RetiredDir    = "retired"           // rotated-out keys and certificates
	dataDirMode   = 0o700
	secretMode    = 0o600
	publicMode    = 0o644
	pemPrivateKey = "PRIVATE KEY"
)

// Identity holds the two keys of a node and the agent id they belong to.
// The agent key signs records and seed-001 messages; the peer key is the
// libp2p identity (its peer id is named in every record).
type Identity struct {
	AgentID  string
	AgentKey *ecdsa.PrivateKey
	PeerKey  crypto.PrivKey
	PeerID   peer.ID
	// Certificate is the PEM bundle certifying AgentKey (leaf first, then
	// intermediates), from CertFile; empty when there is none. Sign puts
	// it in every record of the agent key.
	Certificate string
	// Rotation is the statement by the previous agent key that AgentKey
	// replaces it, from RotationFile; nil when the key was never rotated.
	// Sign puts it in every record of the agent key.
	Rotation *record.KeyRotation

	// pubPEM caches PublicKeyPEM for the AgentKey it was made from: a
	// registration asks for it twice, and encoding it was 8 % of the bytes
	// a registration allocates.
	pubPEM atomic.Pointer[keyPEM]
}

type keyPEM struct {
	key *ecdsa.PrivateKey
	pem string
}

// Generate creates a fresh identity in memory.
func Generate() (*Identity, error) {
	ak, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate agent key: %w", err)
	}
	pk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate peer key: %w", err)
	}
	return newIdentity(uuid.NewString(), ak, pk)
}

func newIdentity(agentID string, ak *ecdsa.PrivateKey, pk crypto.PrivKey) (*Identity, error) {
	id, err := peer.IDFromPrivateKey(pk)
	if err != nil {
		return nil, fmt.Errorf("peer id: %w", err)
	}
	return &Identity{AgentID: agentID, AgentKey: ak, PeerKey: pk, PeerID: id}, nil
}

// PublicKeyPEM returns the agent public key as a PKIX PEM block, the form of
// the record's public_key field.
func (id *Identity) PublicKeyPEM() string {
	if c := id.pubPEM.Load(); c != nil && c.key == id.AgentKey {
		return c.pem
	}
	c := &keyPEM{key: id.AgentKey, pem: PublicKeyPEM(&id.AgentKey.PublicKey)}
	id.pubPEM.Store(c)
	return c.pem
}

// PublicKeyPEM encodes an ECDSA public key as a PKIX PEM block.
func PublicKeyPEM(pub *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic("trust: marshal P-256 public key: " + err.Error())
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// Sign signs the agent with both keys, filling peer_id and public_key when
// they are empty. It fails if they name another identity. A record of the
// identity's agent key also gets the identity's certificate and rotation
// statement when it has none of its own.
func (id *Identity) Sign(a *record.Agent) (*record.SignedAgent, error) {
	if a.PeerID == "" {
		a.PeerID = id.PeerID.String()
	}
	if a.PublicKey == "" {
		a.PublicKey = id.PublicKeyPEM()
	}
	if k, err := record.ParsePublicKeyPEM(a.PublicKey); err == nil && k.Equal(&id.AgentKey.PublicKey) {
		if a.Certificate == "" {
			a.Certificate = id.Certificate
		}
		if a.KeyRotation == nil && id.Rotation != nil && (a.AgentID == "" || a.AgentID == id.Rotation.AgentID) {
			r := *id.Rotation
			a.KeyRotation = &r
		}
	}
	return record.Sign(a, id.AgentKey, id.PeerKey)
}

// LoadOrCreate loads the identity kept in dir, creating whatever is missing:
// the directory (0700), the agent key pair, the peer key and the agent id.
// Existing files are never overwritten. A private key file readable by
// group or others is refused, as ssh does.
func LoadOrCreate(dir string) (*Identity, error) {
	if err := os.MkdirAll(dir, dataDirMode); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	ak, err := loadOrCreateAgentKey(dir)
	if err != nil {
		return nil, err
	}
	pk, err := loadOrCreatePeerKey(filepath.Join(dir, PeerKeyFile))
	if err != nil {
		return nil, err
	}
	agentID, err := loadOrCreateAgentID(filepath.Join(dir, AgentIDFile))
	if err != nil {
		return nil, err
	}
	id, err := newIdentity(agentID, ak, pk)
	if err != nil {
		return nil, err
	}
	if id.Certificate, err = loadCertificate(dir, agentID, &ak.PublicKey); err != nil {
		return nil, err
	}
	if id.Rotation, err = loadRotation(dir, agentID, &ak.PublicKey); err != nil {
		return nil, err
	}
	return id, nil
}

// LoadAgentKey reads an ECDSA P-256 private key from a PEM file (PKCS#8 or
// SEC 1 "EC PRIVATE KEY").
func LoadAgentKey(path string) (*ecdsa.PrivateKey, error) {
	if err := checkSecretMode(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read agent key: %w", err)
	}
	return ParseAgentKeyPEM(b)
}

// ParseAgentKeyPEM parses an ECDSA P-256 private key PEM.
func ParseAgentKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("agent key: not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case pemPrivateKey:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("agent key: PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, errors.New("agent key: must be ECDSA P-256")
	}
	return ek, nil
}

// AgentKeyPEM encodes an agent key as PKCS#8 PEM.
func AgentKeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

func loadOrCreateAgentKey(dir string) (*ecdsa.PrivateKey, error) {
	priv := filepath.Join(dir, AgentKeyFile)
	pub := filepath.Join(dir, AgentPubFile)
	k, err := LoadAgentKey(priv)
	if err == nil {
		// Keep public_key.pem in step with the private key.
		want := PublicKeyPEM(&k.PublicKey)
		if have, rerr := os.ReadFile(pub); rerr != nil || string(have) != want {
			if werr := fsutil.WriteFileAtomic(pub, []byte(want), publicMode); werr != nil {
				return nil, werr
			}
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", priv, err)
	}
	k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate agent key: %w", err)
	}
	b, err := AgentKeyPEM(k)
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(priv, b, secretMode); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(pub, []byte(PublicKeyPEM(&k.PublicKey)), publicMode); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadPeerKey reads a protobuf-encoded libp2p private key.
func LoadPeerKey(path string) (crypto.PrivKey, error) {
	if err := checkSecretMode(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read peer key: %w", err)
	}
	k, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("peer key %s: %w", path, err)
	}
	return k, nil
}

func loadOrCreatePeerKey(path string) (crypto.PrivKey, error) {
	k, err := LoadPeerKey(path)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k, _, err = crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate peer key: %w", err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(path, b, secretMode); err != nil {
		return nil, err
	}
	return k, nil
}

func loadOrCreateAgentID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := record.ValidateAgentID(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read agent id: %w", err)
	}
	id := uuid.NewString()
	if err := fsutil.WriteFileAtomic(path, []byte(id+"\n"), publicMode); err != nil {
		return "", err
	}
	return id, nil
}

func checkSecretMode(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: permissions %04o are too open; the key must be readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	return nil
}
