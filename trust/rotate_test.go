package trust

import (
	"bytes"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// recordOf signs a small record for agentID with key holder id, carrying
// rotation r (may be nil) and certificate cert (may be empty).
func recordOf(t testing.TB, id *Identity, agentID string, issued time.Time, r *record.KeyRotation, cert string) *record.SignedAgent {
	t.Helper()
	a := &record.Agent{Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"}, KeyRotation: r, Certificate: cert}
	a.Fill(agentID, id.PeerID.String(), id.PublicKeyPEM(), uint64(issued.Unix()), issued, time.Hour)
	sa, err := record.Sign(a, id.AgentKey, id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func beatOf(t testing.TB, id *Identity, agentID string, at time.Time) *record.SignedBeat {
	t.Helper()
	sb, err := record.SignBeat(record.Beat{AgentID: agentID, PeerID: id.PeerID.String(), Seq: uint64(at.UnixMilli()), Timestamp: at.UnixMilli()}, id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func rotation(t *testing.T, agentID string, from, to *Identity, at time.Time) *record.KeyRotation {
	t.Helper()
	r, err := record.SignRotation(agentID, from.AgentKey, &to.AgentKey.PublicKey, at)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRotationMovesThePin(t *testing.T) {
	c := &clock{t: t0}
	v := newVerifier(t, Config{RotationGrace: time.Hour}, c)
	a, b, mallory := newIdent(t), newIdent(t), newIdent(t)
	agent := a.AgentID
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, t0, nil, ""), VerifyOptions{}), "")

	// Without a statement the new key is refused; with one from another
	// key too; with a forged one (right old key, wrong signer) as well.
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, nil, ""), VerifyOptions{}), ReasonKeyMismatch)
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, rotation(t, agent, mallory, b, t0), ""), VerifyOptions{}), ReasonKeyMismatch)
	forged := rotation(t, agent, mallory, b, t0)
	forged.OldKey = a.PublicKeyPEM()
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, forged, ""), VerifyOptions{}), ReasonBadSignature)
	// A statement dated in the future.
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, rotation(t, agent, a, b, t0.Add(time.Hour)), ""), VerifyOptions{}), ReasonNotYetValid)
	// An expired record never moves the pin.
	c.set(t0.Add(2 * time.Hour))
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, rotation(t, agent, a, b, t0), ""), VerifyOptions{AllowExpired: true}), ReasonKeyMismatch)
	c.set(t0)
	if k, _ := v.AgentKey(agent); !k.Equal(&a.AgentKey.PublicKey) {
		t.Fatal("the pin moved on a refused record")
	}

	// The rotation: the new key is accepted at once, the pin moves.
	rot := rotation(t, agent, a, b, t0)
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, t0, rot, ""), VerifyOptions{}), "")
	if k, _ := v.AgentKey(agent); !k.Equal(&b.AgentKey.PublicKey) {
		t.Fatal("the pin did not move to the new key")
	}
	if ks := v.AcceptedKeys(agent); len(ks) != 2 || !ks[0].Equal(&b.AgentKey.PublicKey) || !ks[1].Equal(&a.AgentKey.PublicKey) {
		t.Fatalf("accepted keys during the grace period: %d", len(ks))
	}
	// The old key: records and beats accepted until the grace ends.
	c.set(t0.Add(59 * time.Minute))
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, t0.Add(59*time.Minute), nil, ""), VerifyOptions{}), "")
	wantReason(t, v.VerifyBeat(beatOf(t, a, agent, c.now()), ""), "")
	wantReason(t, v.VerifyBeat(beatOf(t, b, agent, c.now()), ""), "")
	// The old key cannot rotate again (only the pinned key can).
	wantReason(t, v.VerifyAgent(recordOf(t, mallory, agent, c.now(), rotation(t, agent, a, mallory, c.now()), ""), VerifyOptions{}), ReasonKeyMismatch)
	c.set(t0.Add(time.Hour))
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, c.now(), nil, ""), VerifyOptions{}), ReasonKeyRetired)
	wantReason(t, v.VerifyBeat(beatOf(t, a, agent, c.now()), ""), ReasonBadSignature)
	wantReason(t, v.VerifyBeat(beatOf(t, b, agent, c.now()), ""), "")
	if ks := v.AcceptedKeys(agent); len(ks) != 1 {
		t.Fatalf("accepted keys after the grace period: %d", len(ks))
	}
	// The statement stays in b's records and changes nothing any more.
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, c.now(), rot, ""), VerifyOptions{}), "")

	// A second rotation b → a2 dated before the first is refused; a later
	// one moves the pin again.
	a2 := newIdent(t)
	wantReason(t, v.VerifyAgent(recordOf(t, a2, agent, c.now(), rotation(t, agent, b, a2, t0.Add(-time.Minute)), ""), VerifyOptions{}), ReasonKeyMismatch)
	wantReason(t, v.VerifyAgent(recordOf(t, a2, agent, c.now(), rotation(t, agent, b, a2, c.now()), ""), VerifyOptions{}), "")
	if k, _ := v.AgentKey(agent); !k.Equal(&a2.AgentKey.PublicKey) {
		t.Fatal("second rotation")
	}
	// The key before the previous one is forgotten.
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, c.now(), nil, ""), VerifyOptions{}), ReasonKeyMismatch)

	if _, err := NewVerifier(Config{RotationGrace: -time.Second}, nil); err == nil {
		t.Fatal("negative grace accepted")
	}
	if d, _ := NewVerifier(Config{}, nil); d.cfg.RotationGrace != 24*time.Hour {
		t.Fatal("default grace is not 24 h")
	}
}

// Under a certificate trust store, a newer certificate for another key
// moves the pin (the certificate decides); an older one does not.
func TestCertificateMovesThePin(t *testing.T) {
	ca := newCA(t)
	s := loadStore(t, ca.StoreConfig())
	c := &clock{t: t0.Add(2 * time.Hour)}
	v := newVerifier(t, Config{Policy: PolicyCA, Chain: s, RotationGrace: time.Hour}, c)
	a, b, old := newIdent(t), newIdent(t), newIdent(t)
	agent := a.AgentID
	bundle := func(id *Identity, at time.Time) string {
		csr, _ := CreateCSR(id, "")
		req, _ := ParseCSRPEM(csr)
		_, pemBundle, err := ca.Issue(req, IssueOptions{AgentID: agent, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return string(pemBundle)
	}
	certOld := bundle(old, t0)
	certA := bundle(a, t0.Add(time.Hour))
	certB := bundle(b, t0.Add(90*time.Minute))
	now := c.now()
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, now, nil, ""), VerifyOptions{}), ReasonNoCertificate)
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, now, nil, certA), VerifyOptions{}), "")
	// An older certificate for another key does not take the agent id.
	wantReason(t, v.VerifyAgent(recordOf(t, old, agent, now, nil, certOld), VerifyOptions{}), ReasonKeyMismatch)
	// A newer one does; a keeps its grace period.
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, now, nil, certB), VerifyOptions{}), "")
	if k, _ := v.AgentKey(agent); !k.Equal(&b.AgentKey.PublicKey) {
		t.Fatal("newer certificate did not move the pin")
	}
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, now, nil, certA), VerifyOptions{}), "")
	c.set(now.Add(time.Hour))
	wantReason(t, v.VerifyAgent(recordOf(t, a, agent, c.now(), nil, certA), VerifyOptions{}), ReasonKeyRetired)
	// A record carrying a certificate of another agent's key.
	wantReason(t, v.VerifyAgent(recordOf(t, b, agent, c.now(), nil, certA), VerifyOptions{}), ReasonKeyMismatch)
}

// Heartbeats carry no certificate: the Verifier re-checks what the
// record's chain proved, so revocation and expiry stop them too.
func TestBeatsFollowTheCertificate(t *testing.T) {
	ca := newCA(t)
	s := loadStore(t, ca.StoreConfig())
	c := &clock{t: t0}
	pins := NewMemPins()
	v, err := NewVerifier(Config{Policy: PolicyCA, Chain: s, Now: c.now}, pins)
	if err != nil {
		t.Fatal(err)
	}
	id, other := newIdent(t), newIdent(t)
	leaf, bundle := issueFor(t, ca, id, IssueOptions{Days: 2})
	var pemBundle bytes.Buffer
	for _, x := range bundle {
		_ = pem.Encode(&pemBundle, &pem.Block{Type: "CERTIFICATE", Bytes: x.Raw})
	}
	wantReason(t, v.VerifyAgent(recordOf(t, id, id.AgentID, t0, nil, pemBundle.String()), VerifyOptions{}), "")
	wantReason(t, v.VerifyBeat(beatOf(t, id, id.AgentID, t0), ""), "")

	// Expiry: past the leaf's notAfter the beat is refused.
	c.set(leaf.NotAfter.Add(time.Second))
	wantReason(t, v.VerifyBeat(beatOf(t, id, id.AgentID, c.now()), ""), ReasonExpired)
	c.set(t0)

	// Revocation: revoke, reload, and the next beat is refused, as is the record.
	if _, err := ca.Revoke(leaf.SerialNumber, t0, 0); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v.VerifyBeat(beatOf(t, id, id.AgentID, t0), ""), "")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v.VerifyBeat(beatOf(t, id, id.AgentID, t0), ""), ReasonRevoked)
	wantReason(t, v.VerifyAgent(recordOf(t, id, id.AgentID, t0.Add(time.Second), nil, pemBundle.String()), VerifyOptions{}), ReasonRevoked)

	// A pin that no certificate ever backed (made under another policy)
	// does not carry heartbeats under the ca policy.
	if err := pins.PutPin(other.AgentID, Pin{KeyPEM: other.PublicKeyPEM(), FirstSeen: t0}); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v.VerifyBeat(beatOf(t, other, other.AgentID, t0), ""), ReasonNoCertificate)
	// A restart forgets the bindings but keeps the pins: a certified pin
	// still carries heartbeats until the next record is checked.
	v2, err := NewVerifier(Config{Policy: PolicyCA, Chain: s, Now: c.now}, pins)
	if err != nil {
		t.Fatal(err)
	}
	id3 := newIdent(t)
	_, b3 := issueFor(t, ca, id3, IssueOptions{})
	var p3 bytes.Buffer
	for _, x := range b3 {
		_ = pem.Encode(&p3, &pem.Block{Type: "CERTIFICATE", Bytes: x.Raw})
	}
	wantReason(t, v.VerifyAgent(recordOf(t, id3, id3.AgentID, t0, nil, p3.String()), VerifyOptions{}), "")
	wantReason(t, v2.VerifyBeat(beatOf(t, id3, id3.AgentID, t0), ""), "")
}

func TestIdentityRotateOnDisk(t *testing.T) {
	dir := t.TempDir()
	id, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id.Certificate != "" || id.Rotation != nil {
		t.Fatal("fresh identity has a certificate or a rotation")
	}
	// Install a certificate, then rotate: the certificate is retired with
	// the old key.
	ca := newCA(t)
	_, bundle := issueFor(t, ca, id, IssueOptions{})
	var pb bytes.Buffer
	for _, x := range bundle {
		_ = pem.Encode(&pb, &pem.Block{Type: "CERTIFICATE", Bytes: x.Raw})
	}
	other := newIdent(t)
	if err := InstallCertificate(other, dir, pb.Bytes()); err == nil || !strings.Contains(err.Error(), "not the agent key") {
		t.Fatalf("certificate of another key installed: %v", err)
	}
	if err := InstallCertificate(id, dir, pb.Bytes()); err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreate(dir)
	if err != nil || again.Certificate != id.Certificate || id.Certificate == "" {
		t.Fatalf("certificate not loaded: %v", err)
	}
	sa, err := again.Sign(&record.Agent{Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "h:1"}, AgentID: id.AgentID,
		Seq: 1, IssuedAt: t0.Format(time.RFC3339), TTLSeconds: 60})
	if err != nil || sa.Agent.Certificate != id.Certificate {
		t.Fatalf("Sign does not attach the certificate: %v", err)
	}

	oldPub := id.PublicKeyPEM()
	fp := Fingerprint(&id.AgentKey.PublicKey)
	nid, err := Rotate(id, dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if nid.AgentID != id.AgentID || nid.PeerID != id.PeerID || nid.AgentKey.Equal(id.AgentKey) || nid.Certificate != "" || nid.Rotation == nil {
		t.Fatal("rotated identity")
	}
	for name, mode := range map[string]os.FileMode{
		AgentKeyFile: 0o600, AgentPubFile: 0o644, RotationFile: 0o644,
		filepath.Join(RetiredDir, "private_key."+fp+".pem"): 0o600,
		filepath.Join(RetiredDir, "public_key."+fp+".pem"):  0o644,
		filepath.Join(RetiredDir, "certificate."+fp+".pem"): 0o644,
	} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, CertFile)); !os.IsNotExist(err) {
		t.Fatal("the old certificate is still installed")
	}
	loaded, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.AgentKey.Equal(nid.AgentKey) || loaded.Rotation == nil || *loaded.Rotation != *nid.Rotation || loaded.Rotation.Verify() != nil {
		t.Fatal("rotation not loaded back")
	}
	if loaded.Rotation.OldKey != oldPub {
		t.Fatal("statement's old key")
	}
	// Records of the new key carry the statement; a verifier that pinned
	// the old key follows.
	c := &clock{t: t0}
	v := newVerifier(t, Config{}, c)
	wantReason(t, v.VerifyAgent(recordOf(t, id, id.AgentID, t0, nil, ""), VerifyOptions{}), "")
	a := &record.Agent{Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "h:1"}}
	a.Fill(loaded.AgentID, "", "", 2, t0, time.Hour)
	nsa, err := loaded.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	if nsa.Agent.KeyRotation == nil {
		t.Fatal("Sign does not attach the rotation")
	}
	wantReason(t, v.VerifyAgent(nsa, VerifyOptions{}), "")

	// Rebind moves a hosted record of the old key onto the new one.
	old := recordOf(t, id, id.AgentID, t0, nil, "").Agent
	if !loaded.Rebind(&old) || old.PublicKey != loaded.PublicKeyPEM() || old.KeyRotation == nil {
		t.Fatal("Rebind")
	}
	if loaded.Rebind(&old) {
		t.Fatal("Rebind of a current record")
	}
	if _, err := loaded.Sign(&old); err != nil {
		t.Fatal(err)
	}

	// A statement whose new key is not the current key (an interrupted
	// rotation) is ignored; one that does not verify stops the load.
	st := mustRead(t, filepath.Join(dir, RotationFile))
	if err := os.WriteFile(filepath.Join(dir, AgentKeyFile), mustRead(t, filepath.Join(dir, RetiredDir, "private_key."+fp+".pem")), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := LoadOrCreate(dir)
	if err != nil || back.Rotation != nil {
		t.Fatalf("stale statement: %v %v", err, back.Rotation)
	}
	bad := bytes.Replace(st, []byte(`"signature":"`), []byte(`"signature":"AAAA`), 1)
	if err := os.WriteFile(filepath.Join(dir, RotationFile), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("a statement that does not verify was loaded")
	}
	// A certificate for another key in the data directory stops the load.
	if err := os.WriteFile(filepath.Join(dir, RotationFile), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CertFile), pb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, AgentKeyFile), mustRead(t, filepath.Join(dir, RetiredDir, "private_key."+fp+".pem")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatalf("the old key with its own certificate: %v", err)
	}
	k2, _ := AgentKeyPEM(nid.AgentKey)
	if err := os.WriteFile(filepath.Join(dir, AgentKeyFile), k2, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), CertFile) {
		t.Fatalf("certificate of another key: %v", err)
	}
}

func TestCSR(t *testing.T) {
	id := newIdent(t)
	b, err := CreateCSR(id, "billing-agent")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSRPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	if csr.Subject.CommonName != "billing-agent" || len(csr.URIs) != 1 || csr.URIs[0].String() != AgentURI(id.AgentID) || csr.CheckSignature() != nil {
		t.Fatalf("%+v", csr)
	}
	if csrAgentID(csr) != id.AgentID {
		t.Fatal(csrAgentID(csr))
	}
	for _, in := range []string{"", "junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", string(b) + "trailing"} {
		if _, err := ParseCSRPEM([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	// The CA refuses requests that do not name an agent, or a bad skill id.
	ca := newCA(t)
	if _, _, err := ca.Issue(csr, IssueOptions{Now: t0, AgentID: "agent-001"}); err == nil {
		t.Fatal("non-UUID agent id accepted")
	}
	if _, _, err := ca.Issue(csr, IssueOptions{Now: t0, SkillID: "a;b"}); err == nil {
		t.Fatal("bad skill id accepted")
	}
	bare, _ := CreateCSR(id, "not-a-uuid")
	bcsr, _ := ParseCSRPEM(bare)
	bcsr.URIs = nil
	if csrAgentID(bcsr) != "" {
		t.Fatal("CN that is not a UUID names an agent")
	}
	// Reopening the CA keeps its state.
	leaf, _, err := ca.Issue(csr, IssueOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	re, err := OpenCA(ca.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := re.Issued(leaf.SerialNumber); err != nil || !strings.HasSuffix(p, FormatSerial(leaf.SerialNumber)+".pem") {
		t.Fatal(p, err)
	}
	if known, err := re.Revoke(leaf.SerialNumber, t0, 7); err != nil || !known {
		t.Fatal(known, err)
	}
	if known, err := re.Revoke(leaf.SerialNumber, t0, 7); err != nil || !known { // twice: a no-op
		t.Fatal(known, err)
	}
	if _, err := InitCA(ca.Dir, CAOptions{}); err == nil {
		t.Fatal("InitCA over an existing CA")
	}
}

// Every record-level rejection names the member at fault, for error bodies.
func TestRejectNamesTheField(t *testing.T) {
	c := &clock{t: t0}
	ca := newCA(t)
	s := loadStore(t, ca.StoreConfig())
	a, b, outsider := newIdent(t), newIdent(t), newIdent(t)
	v := newVerifier(t, Config{Policy: PolicyCA, Chain: s, AllowList: []string{a.AgentID}}, c)
	al := newVerifier(t, Config{Policy: PolicyAllowlist, AllowList: []string{a.AgentID}}, c)
	field := func(err error) string {
		t.Helper()
		var re *RejectError
		if !errors.As(err, &re) {
			t.Fatalf("not a rejection: %v", err)
		}
		return re.Field
	}
	wantReason(t, v.VerifyAgent(recordOf(t, a, a.AgentID, t0, nil, ""), VerifyOptions{}), "")
	for _, c := range []struct {
		err   error
		field string
	}{
		{v.VerifyAgent(recordOf(t, b, a.AgentID, t0, nil, ""), VerifyOptions{}), "public_key"},
		{v.VerifyAgent(recordOf(t, b, b.AgentID, t0, nil, ""), VerifyOptions{}), "certificate"},
		{v.VerifyAgent(recordOf(t, b, b.AgentID, t0, nil, certPEM(t, b)), VerifyOptions{}), "certificate"},
		{v.VerifyAgent(recordOf(t, a, a.AgentID, t0.Add(-2*time.Hour), nil, ""), VerifyOptions{}), "issued_at"},
		{al.VerifyAgent(recordOf(t, outsider, outsider.AgentID, t0, nil, ""), VerifyOptions{}), "agent_id"},
		{v.VerifyAgent(recordOf(t, b, a.AgentID, t0, rotation(t, a.AgentID, a, b, t0.Add(time.Hour)), ""), VerifyOptions{}), "key_rotation"},
	} {
		if got := field(c.err); got != c.field {
			t.Errorf("%v: field %q, want %q", c.err, got, c.field)
		}
	}
}
