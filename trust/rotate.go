package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
)

// Rotate replaces the agent key kept in dir (seed 000 §6.1): it generates
// a new ECDSA P-256 key, signs a rotation statement from the old key to
// the new one, keeps the old key (retired/private_key.<fingerprint>.pem,
// mode 0600) and moves the old key's certificate aside
// (retired/certificate.<fingerprint>.pem), writes the statement
// (key_rotation.json) and installs the new key pair. It returns the new
// identity: the same agent id and peer key, the new agent key, no
// certificate (a certificate binds one key; request one for the new key),
// and the statement, which Sign puts into every record so that peers move
// their pin to the new key and accept the old one for their grace period.
//
// The steps are ordered so that a crash at any point leaves a data
// directory that loads: the statement is written before the new key, and
// a statement whose new key is not the current key is ignored on load.
// Run it while no daemon uses dir.
func Rotate(id *Identity, dir string, now time.Time) (*Identity, error) {
	nk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate agent key: %w", err)
	}
	r, err := record.SignRotation(id.AgentID, id.AgentKey, &nk.PublicKey, now)
	if err != nil {
		return nil, fmt.Errorf("sign rotation statement: %w", err)
	}
	stmt, err := record.MarshalRotation(r)
	if err != nil {
		return nil, err
	}
	oldPEM, err := AgentKeyPEM(id.AgentKey)
	if err != nil {
		return nil, err
	}
	newPEM, err := AgentKeyPEM(nk)
	if err != nil {
		return nil, err
	}
	retired := filepath.Join(dir, RetiredDir)
	if err := os.MkdirAll(retired, dataDirMode); err != nil {
		return nil, fmt.Errorf("create %s: %w", retired, err)
	}
	fp := Fingerprint(&id.AgentKey.PublicKey)
	if err := fsutil.WriteFileAtomic(filepath.Join(retired, "private_key."+fp+".pem"), oldPEM, secretMode); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(retired, "public_key."+fp+".pem"), []byte(id.PublicKeyPEM()), publicMode); err != nil {
		return nil, err
	}
	certPath := filepath.Join(dir, CertFile)
	if _, err := os.Stat(certPath); err == nil {
		if err := os.Rename(certPath, filepath.Join(retired, "certificate."+fp+".pem")); err != nil {
			return nil, fmt.Errorf("retire %s: %w", certPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, RotationFile), append(stmt, '\n'), publicMode); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, AgentKeyFile), newPEM, secretMode); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, AgentPubFile), []byte(PublicKeyPEM(&nk.PublicKey)), publicMode); err != nil {
		return nil, err
	}
	return &Identity{AgentID: id.AgentID, AgentKey: nk, PeerKey: id.PeerKey, PeerID: id.PeerID, Rotation: r}, nil
}

// Rebind moves a record of this identity's previous agent key onto the
// current key: when a's public_key is the old key of the identity's
// rotation statement, it sets public_key to the current key and the
// certificate and key_rotation to the identity's, and reports true. A
// node calls it on the records it hosts after a restart with a rotated
// key, then signs them again.
func (id *Identity) Rebind(a *record.Agent) bool {
	if id.Rotation == nil || a.PublicKey == "" || (a.AgentID != "" && a.AgentID != id.Rotation.AgentID) {
		return false
	}
	k, err := record.ParsePublicKeyPEM(a.PublicKey)
	if err != nil {
		return false
	}
	oldKey, _, err := id.Rotation.Keys()
	if err != nil || !oldKey.Equal(k) {
		return false
	}
	r := *id.Rotation
	a.PublicKey, a.Certificate, a.KeyRotation = id.PublicKeyPEM(), id.Certificate, &r
	return true
}

// InstallCertificate checks that bundle (PEM, leaf first, then
// intermediates) certifies the identity's agent key and names its agent
// id, writes it to dir's certificate.pem and sets id.Certificate. It does
// not check the chain (the verifying peers' trust stores do; use agentd
// trust verify for that).
func InstallCertificate(id *Identity, dir string, bundle []byte) error {
	norm, err := checkCertificateFor(string(bundle), id.AgentID, &id.AgentKey.PublicKey)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, CertFile), []byte(norm), publicMode); err != nil {
		return err
	}
	id.Certificate = norm
	return nil
}

// checkCertificateFor parses a bundle, checks its leaf certifies key and
// names agentID, and returns it re-encoded (PEM, one block per certificate).
func checkCertificateFor(bundle, agentID string, key *ecdsa.PublicKey) (string, error) {
	if len(bundle) > record.MaxCertificateBytes {
		return "", fmt.Errorf("certificate bundle is %d bytes, a record carries at most %d", len(bundle), record.MaxCertificateBytes)
	}
	certs, err := record.ParseCertificatesPEM(bundle)
	if err != nil {
		return "", fmt.Errorf("certificate bundle: %w", err)
	}
	if len(certs) > MaxBundleCerts {
		return "", fmt.Errorf("certificate bundle holds %d certificates, at most %d are accepted", len(certs), MaxBundleCerts)
	}
	leaf := certs[0]
	if lk, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !lk.Equal(key) {
		return "", fmt.Errorf("certificate %s certifies %s, not the agent key %s: request a certificate for this key (agentd cert request)", certLabel(leaf), certKeyLabel(leaf), Fingerprint(key))
	}
	if !namesID(leaf, AgentURIPrefix, agentID) {
		return "", fmt.Errorf("certificate %s does not name agent %s (it names %s)", certLabel(leaf), agentID, describeNames(leaf))
	}
	var b strings.Builder
	for _, c := range certs {
		b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return b.String(), nil
}

func loadCertificate(dir, agentID string, key *ecdsa.PublicKey) (string, error) {
	path := filepath.Join(dir, CertFile)
	b, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	norm, err := checkCertificateFor(string(b), agentID, key)
	if err != nil {
		return "", fmt.Errorf("%s: %w (or remove the file)", path, err)
	}
	return norm, nil
}

// loadRotation reads the rotation statement of dir. A statement about
// another agent or whose new key is not the current key is stale (a
// rotation interrupted before the new key was installed, or a key replaced
// by hand) and ignored; one that does not verify is an error.
func loadRotation(dir, agentID string, key *ecdsa.PublicKey) (*record.KeyRotation, error) {
	path := filepath.Join(dir, RotationFile)
	b, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := record.ParseRotation(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := r.Verify(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	_, nk, err := r.Keys()
	if err != nil || r.AgentID != agentID || !nk.Equal(key) {
		return nil, nil
	}
	return r, nil
}

// CreateCSR returns a PEM certificate signing request for the identity's
// agent key, naming the agent by the URI subjectAltName
// urn:agentd:agent:<agent_id> and the subject CN (cn, default the agent
// id). agentd ca issue (or any CA) turns it into the agent's certificate.
func CreateCSR(id *Identity, cn string) ([]byte, error) {
	if cn == "" {
		cn = id.AgentID
	}
	u, err := url.Parse(AgentURI(id.AgentID))
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:            pkix.Name{CommonName: cn},
		URIs:               []*url.URL{u},
		SignatureAlgorithm: x509.ECDSAWithSHA256,
	}, id.AgentKey)
	if err != nil {
		return nil, fmt.Errorf("create certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
