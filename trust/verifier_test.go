package trust

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable time source for the Verifier.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func newIdent(t testing.TB) *Identity {
	t.Helper()
	id, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// signedRecord signs a small record of id, issued at issued, valid an hour.
func signedRecord(t *testing.T, id *Identity, agentID string, issued time.Time) *record.SignedAgent {
	t.Helper()
	a := &record.Agent{
		Capabilities: map[string]string{},
		Transport:    record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"},
		Skills: []record.Skill{{SkillID: "s", Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: "c"}}}},
	}
	a.Fill(agentID, id.PeerID.String(), id.PublicKeyPEM(), 1, issued, time.Hour)
	sa, err := record.Sign(a, id.AgentKey, id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func newVerifier(t *testing.T, cfg Config, c *clock) *Verifier {
	t.Helper()
	cfg.Now = c.now
	v, err := NewVerifier(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantReason(t *testing.T, err error, r Reason) {
	t.Helper()
	var re *RejectError
	if r == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	if !errors.As(err, &re) || re.Reason != r {
		t.Fatalf("got %v, want rejection %q", err, r)
	}
	if ReasonOf(err) != r {
		t.Fatalf("ReasonOf(%v) = %q", err, ReasonOf(err))
	}
}

func TestOpenPolicyPinsTheFirstKey(t *testing.T) {
	c := &clock{t: t0}
	v := newVerifier(t, Config{}, c)
	if v.Policy() != PolicyOpen {
		t.Fatalf("default policy %s", v.Policy())
	}
	first, second := newIdent(t), newIdent(t)
	wantReason(t, v.VerifyAgent(signedRecord(t, first, first.AgentID, t0), VerifyOptions{}), "")
	if k, ok := v.AgentKey(first.AgentID); !ok || !k.Equal(&first.AgentKey.PublicKey) {
		t.Fatal("first key not pinned")
	}
	// Someone else claims the agent_id with another key.
	err := v.VerifyAgent(signedRecord(t, second, first.AgentID, t0), VerifyOptions{})
	wantReason(t, err, ReasonKeyMismatch)
	// The owner still gets through, and the pin did not move.
	wantReason(t, v.VerifyAgent(signedRecord(t, first, first.AgentID, t0.Add(time.Minute)), VerifyOptions{}), "")
	if k, _ := v.AgentKey(first.AgentID); !k.Equal(&first.AgentKey.PublicKey) {
		t.Fatal("the pin moved")
	}
	if _, ok := v.AgentKey(second.AgentID); ok {
		t.Fatal("an unseen agent has a key")
	}
}

func TestAllowlistPolicy(t *testing.T) {
	c := &clock{t: t0}
	in, out := newIdent(t), newIdent(t)
	v := newVerifier(t, Config{Policy: PolicyAllowlist, AllowList: []string{in.AgentID}}, c)
	wantReason(t, v.VerifyAgent(signedRecord(t, in, in.AgentID, t0), VerifyOptions{}), "")
	wantReason(t, v.VerifyAgent(signedRecord(t, out, out.AgentID, t0), VerifyOptions{}), ReasonNotAllowlisted)
	if !v.Allowed(in.AgentID) || v.Allowed(out.AgentID) {
		t.Fatal("Allowed disagrees")
	}
	sb, _ := record.SignBeat(record.Beat{AgentID: out.AgentID, PeerID: out.PeerID.String(), Seq: 2, Timestamp: t0.UnixMilli()}, out.AgentKey)
	wantReason(t, v.VerifyBeat(sb, ""), ReasonNotAllowlisted)
	// The open policy admits everyone.
	open := newVerifier(t, Config{Policy: PolicyOpen, AllowList: []string{in.AgentID}}, c)
	if !open.Allowed(out.AgentID) {
		t.Fatal("open policy refuses")
	}
}

func TestExpiryWindow(t *testing.T) {
	c := &clock{t: t0}
	id := newIdent(t)
	v := newVerifier(t, Config{}, c)
	sa := signedRecord(t, id, id.AgentID, t0)
	c.set(t0.Add(time.Hour))
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), ReasonExpired)
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{AllowExpired: true}), "")
	c.set(t0.Add(time.Hour - time.Millisecond))
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), "")

	// issued_at in the future: tolerated within the clock skew only.
	c.set(t0)
	wantReason(t, v.VerifyAgent(signedRecord(t, id, id.AgentID, t0.Add(4*time.Minute)), VerifyOptions{}), "")
	wantReason(t, v.VerifyAgent(signedRecord(t, id, id.AgentID, t0.Add(10*time.Minute)), VerifyOptions{}), ReasonNotYetValid)
	strict := newVerifier(t, Config{ClockSkew: time.Second}, c)
	wantReason(t, strict.VerifyAgent(signedRecord(t, id, id.AgentID, t0.Add(4*time.Minute)), VerifyOptions{}), ReasonNotYetValid)
}

func TestPeerBinding(t *testing.T) {
	c := &clock{t: t0}
	id, other := newIdent(t), newIdent(t)
	v := newVerifier(t, Config{}, c)
	sa := signedRecord(t, id, id.AgentID, t0)
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{From: other.PeerID}), ReasonPeerMismatch)
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{From: id.PeerID}), "")

	// Signatures are checked first: a broken one is refused with its reason.
	bad := sa.Clone()
	bad.Signature = append([]byte(nil), sa.Signature...)
	bad.Signature[len(bad.Signature)-1] ^= 1
	wantReason(t, v.VerifyAgent(bad, VerifyOptions{}), ReasonBadSignature)
	badPeer := sa.Clone()
	badPeer.PeerSignature, _ = other.PeerKey.Sign(sa.Canonical())
	wantReason(t, v.VerifyAgent(badPeer, VerifyOptions{}), ReasonBadPeerSignature)
	unsigned := sa.Clone()
	unsigned.PeerSignature = nil
	wantReason(t, v.VerifyAgent(unsigned, VerifyOptions{}), ReasonUnsigned)
}

func TestVerifyBeat(t *testing.T) {
	c := &clock{t: t0}
	id, other := newIdent(t), newIdent(t)
	v := newVerifier(t, Config{}, c)
	beat := record.Beat{AgentID: id.AgentID, PeerID: id.PeerID.String(), Seq: 2, Status: record.StatusHealthy, Timestamp: t0.UnixMilli()}
	sb, err := record.SignBeat(beat, id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	wantReason(t, v.VerifyBeat(sb, ""), ReasonUnknownKey)
	wantReason(t, v.VerifyAgent(signedRecord(t, id, id.AgentID, t0), VerifyOptions{}), "")
	wantReason(t, v.VerifyBeat(sb, id.PeerID), "")
	wantReason(t, v.VerifyBeat(sb, other.PeerID), ReasonPeerMismatch)
	forged, _ := record.SignBeat(beat, other.AgentKey)
	wantReason(t, v.VerifyBeat(forged, ""), ReasonBadSignature)
}

// A rotated-out key is accepted until the end of its grace period.
func TestRotationGrace(t *testing.T) {
	c := &clock{t: t0}
	oldID, newID := newIdent(t), newIdent(t)
	pins := NewMemPins()
	v, err := NewVerifier(Config{Now: c.now}, pins)
	if err != nil {
		t.Fatal(err)
	}
	agentID := oldID.AgentID
	if err := pins.PutPin(agentID, Pin{KeyPEM: newID.PublicKeyPEM(), FirstSeen: t0, PrevKeyPEM: oldID.PublicKeyPEM(), PrevUntil: t0.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	oldRec := signedRecord(t, oldID, agentID, t0)
	wantReason(t, v.VerifyAgent(signedRecord(t, newID, agentID, t0), VerifyOptions{}), "")
	wantReason(t, v.VerifyAgent(oldRec, VerifyOptions{}), "")
	oldBeat, _ := record.SignBeat(record.Beat{AgentID: agentID, PeerID: oldID.PeerID.String(), Seq: 3, Timestamp: t0.UnixMilli()}, oldID.AgentKey)
	wantReason(t, v.VerifyBeat(oldBeat, ""), "")
	c.set(t0.Add(24 * time.Hour))
	wantReason(t, v.VerifyAgent(oldRec, VerifyOptions{AllowExpired: true}), ReasonKeyRetired)
	wantReason(t, v.VerifyBeat(oldBeat, ""), ReasonBadSignature)
}

// fakeChain is a ChainVerifier that records its calls and answers err.
type fakeChain struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (f *fakeChain) VerifyChain(chain []*x509.Certificate, key *ecdsa.PublicKey, agentID string, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(chain) == 0 || !chain[0].PublicKey.(*ecdsa.PublicKey).Equal(key) {
		return fmt.Errorf("leaf does not certify the key")
	}
	return f.err
}

func certPEM(t *testing.T, id *Identity) string {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: id.AgentID},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &id.AgentKey.PublicKey, id.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestCAPolicy(t *testing.T) {
	c := &clock{t: t0}
	if _, err := NewVerifier(Config{Policy: PolicyCA}, nil); err == nil {
		t.Fatal("ca policy without a trust store accepted")
	}
	id, listed := newIdent(t), newIdent(t)
	chain := &fakeChain{}
	v := newVerifier(t, Config{Policy: PolicyCA, Chain: chain, AllowList: []string{listed.AgentID}}, c)
	wantReason(t, v.VerifyAgent(signedRecord(t, id, id.AgentID, t0), VerifyOptions{}), ReasonNoCertificate)
	wantReason(t, v.VerifyAgent(signedRecord(t, listed, listed.AgentID, t0), VerifyOptions{}), "")

	withCert := func(cert string) *record.SignedAgent {
		a := &record.Agent{Capabilities: map[string]string{}, Transport: record.Transport{Type: "tcp", Endpoint: "h:1"}, Certificate: cert}
		a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), 2, t0, time.Hour)
		sa, err := record.Sign(a, id.AgentKey, id.PeerKey)
		if err != nil {
			t.Fatal(err)
		}
		return sa
	}
	sa := withCert(certPEM(t, id))
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), "")
	if chain.calls != 1 {
		t.Fatalf("chain consulted %d times", chain.calls)
	}
	chain.err = &RejectError{Reason: ReasonRevoked, Detail: "serial 1"}
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), ReasonRevoked)
	chain.err = errors.New("no path to a root")
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), ReasonUnknownIssuer)
	// A certificate for another key is refused by the chain check.
	chain.err = nil
	wantReason(t, v.VerifyAgent(withCert(certPEM(t, listed)), VerifyOptions{}), ReasonUnknownIssuer)
}

func TestNewVerifierRejectsBadConfig(t *testing.T) {
	if _, err := NewVerifier(Config{Policy: "trusting"}, nil); err == nil {
		t.Error("unknown policy accepted")
	}
	if _, err := NewVerifier(Config{AllowList: []string{"agent-001"}}, nil); err == nil {
		t.Error("allow-list entry that is not a UUIDv4 accepted")
	}
	for _, p := range []Policy{PolicyOpen, PolicyAllowlist, PolicyCA} {
		if !p.Valid() {
			t.Errorf("%s invalid", p)
		}
	}
}

func TestReasonOf(t *testing.T) {
	for err, want := range map[error]Reason{
		nil:                       "",
		reject(ReasonReplay, "x"): ReasonReplay,
		fmt.Errorf("w: %w", record.ErrBadSignature): ReasonBadSignature,
		record.ErrBadPeerSignature:                  ReasonBadPeerSignature,
		record.ErrUnsigned:                          ReasonUnsigned,
		record.ErrTooLarge:                          ReasonTooLarge,
		record.ErrUnsupportedVersion:                ReasonVersion,
		&record.FieldError{Field: "a"}:              ReasonMalformed,
		errors.New("anything else"):                 ReasonMalformed,
	} {
		if got := ReasonOf(err); got != want {
			t.Errorf("ReasonOf(%v) = %q, want %q", err, got, want)
		}
	}
	if s := (&RejectError{Reason: ReasonExpired}).Error(); s != "rejected: expired" {
		t.Errorf("%q", s)
	}
}

// Concurrent first sightings of one agent pin exactly one key.
func TestConcurrentPinning(t *testing.T) {
	c := &clock{t: t0}
	v := newVerifier(t, Config{}, c)
	owner := newIdent(t)
	ids := []*Identity{owner, newIdent(t), newIdent(t), newIdent(t)}
	recs := make([]*record.SignedAgent, len(ids))
	for i, id := range ids {
		recs[i] = signedRecord(t, id, owner.AgentID, t0)
	}
	var wg sync.WaitGroup
	results := make([]error, 4*len(ids))
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = v.VerifyAgent(recs[i%len(recs)], VerifyOptions{})
		}(i)
	}
	wg.Wait()
	pinned, ok := v.AgentKey(owner.AgentID)
	if !ok {
		t.Fatal("nothing pinned")
	}
	for i, err := range results {
		same := pinned.Equal(&ids[i%len(ids)].AgentKey.PublicKey)
		if same != (err == nil) {
			t.Fatalf("record %d: %v (holds the pinned key: %v)", i, err, same)
		}
	}
	if Fingerprint(pinned) == "" || len(Fingerprint(pinned)) != 16 {
		t.Fatal(Fingerprint(pinned))
	}
}

// holdingPins holds the pin write of one agent until released.
type holdingPins struct {
	*MemPins
	hold             string
	entered, release chan struct{}
}

func (h *holdingPins) PutPin(agentID string, p Pin) error {
	if agentID == h.hold {
		close(h.entered)
		<-h.release
	}
	return h.MemPins.PutPin(agentID, p)
}

// The pin write of one agent does not hold up the verification of another
// (a registry's clients register different agents at once): while A's
// first pin is being written, B's first sighting is decided and pinned.
func TestPinWritesOfDifferentAgentsDoNotWait(t *testing.T) {
	c := &clock{t: t0}
	a := newIdent(t)
	hp := &holdingPins{MemPins: NewMemPins(), hold: a.AgentID, entered: make(chan struct{}), release: make(chan struct{})}
	v, err := NewVerifier(Config{Now: c.now}, hp)
	if err != nil {
		t.Fatal(err)
	}
	b := newIdent(t)
	for v.pinLock(b.AgentID) == v.pinLock(a.AgentID) {
		b = newIdent(t) // another lock than A's, as nearly every agent has
	}
	errA := make(chan error, 1)
	go func() { errA <- v.VerifyAgent(signedRecord(t, a, a.AgentID, t0), VerifyOptions{}) }()
	<-hp.entered
	doneB := make(chan error, 1)
	go func() { doneB <- v.VerifyAgent(signedRecord(t, b, b.AgentID, t0), VerifyOptions{}) }()
	select {
	case err := <-doneB:
		if err != nil {
			t.Fatalf("B: %v", err)
		}
	case <-time.After(30 * time.Second): // a deadlock guard, not a timing assertion
		close(hp.release)
		t.Fatal("B's verification waited for A's pin write")
	}
	close(hp.release)
	if err := <-errA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if _, ok := v.AgentKey(b.AgentID); !ok {
		t.Fatal("B not pinned")
	}
}

// countingPins counts the pin store's reads.
type countingPins struct {
	*MemPins
	reads atomic.Int64
}

func (c *countingPins) GetPin(agentID string) (Pin, bool, error) {
	c.reads.Add(1)
	return c.MemPins.GetPin(agentID)
}

// A record of the pinned key again is decided from the verifier's hint,
// without a pin store read (a Badger read under the pin lock on a node);
// another key still meets the store and its verdict, and a rotation moves
// the hint with the pin.
func TestPinHintSkipsTheStore(t *testing.T) {
	c := &clock{t: t0}
	pins := &countingPins{MemPins: NewMemPins()}
	v, err := NewVerifier(Config{Now: c.now}, pins)
	if err != nil {
		t.Fatal(err)
	}
	id, thief := newIdent(t), newIdent(t)
	rec := signedRecord(t, id, id.AgentID, t0)
	wantReason(t, v.VerifyAgent(rec, VerifyOptions{}), "")
	first := pins.reads.Load()
	for range 5 {
		wantReason(t, v.VerifyAgent(signedRecord(t, id, id.AgentID, t0), VerifyOptions{}), "")
	}
	if got := pins.reads.Load(); got != first {
		t.Fatalf("%d pin store reads for records of the pinned key", got-first)
	}
	wantReason(t, v.VerifyAgent(signedRecord(t, thief, id.AgentID, t0), VerifyOptions{}), ReasonKeyMismatch)
	if pins.reads.Load() == first {
		t.Fatal("another key was decided without the pin store")
	}
	// The hint follows a pin written elsewhere in this verifier: a new
	// agent id pins its first key, and that key's next record is a hit.
	other := signedRecord(t, thief, thief.AgentID, t0)
	wantReason(t, v.VerifyAgent(other, VerifyOptions{}), "")
	n := pins.reads.Load()
	wantReason(t, v.VerifyAgent(other, VerifyOptions{}), "")
	if pins.reads.Load() != n {
		t.Fatal("the first key of a new agent id did not leave a hint")
	}
}
