package lan

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// javaSkill is a seed-001 skill of another implementation that signs with
// its own ECDSA key (SHA256withECDSA, §10.1) and holds a certificate.
type javaSkill struct {
	agentID string
	key     *ecdsa.PrivateKey
	chain   []string // base64 DER, leaf first
}

func selfSignedSkill(t *testing.T, agentID string) *javaSkill {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: agentID},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &javaSkill{agentID: agentID, key: key, chain: []string{base64.StdEncoding.EncodeToString(der)}}
}

func (j *javaSkill) text(t *testing.T, m record.SkillMessage) []byte {
	t.Helper()
	if err := m.SignECDSA(j.key); err != nil {
		t.Fatal(err)
	}
	s, err := m.Format()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

func (j *javaSkill) register(t *testing.T, s record.Skill, ts int64, withCert bool) []byte {
	m := registerOf(j.agentID, s, ts)
	if withCert {
		m.Certificate = j.chain
	}
	return j.text(t, m)
}

func nextMsg(t *testing.T, s *memSock, prefix string) *record.SkillMessage {
	t.Helper()
	d := s.next(t, prefix, time.Second)
	m, err := record.ParseSkillMessage(string(d.b))
	if err != nil {
		t.Fatalf("%q does not parse: %v", d.b, err)
	}
	return m
}

// §10.3 end to end with a self-signed certificate and no trust store (the
// open policy takes the certificate's key as the agent's own, first key
// seen): SKILL_REGISTER with certificate, CHALLENGE, CHALLENGE_RESPONSE,
// SKILL_REGISTER_ACK; then the skill's ECDSA heartbeats, scene join
// (§2.2) and unregistration (§9.2, acknowledged) are verified with the
// proven key.
func TestSeed001ECDSAChallenge(t *testing.T) {
	bubble(t, func(t *testing.T) {
		f := newLoop(t, nil)
		j := selfSignedSkill(t, "agent-001")
		fs := skill("skill-hr", record.SkillEnterprise, []string{"auth"}, "hr-read")
		now := time.Now().UnixMilli()

		// Without a certificate an unknown ECDSA signer is refused, and
		// told what to do.
		f.handle(j.register(t, fs, now, false))
		if ack := ackFor(t, f.sn, j.agentID); ack.Ack != record.AckUnauthorized {
			t.Fatalf("ack %s", ack.Ack)
		}

		f.handle(j.register(t, fs, now+1, true))
		ch := nextMsg(t, f.sn, "CHALLENGE:"+j.agentID+";")
		if ch.SkillID != fs.SkillID || len(ch.Nonce) != 32 {
			t.Fatalf("%+v", ch)
		}
		// A response with another nonce, or signed by another key, does
		// not pass.
		other := selfSignedSkill(t, j.agentID)
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgChallengeResponse, AgentID: j.agentID, SkillID: fs.SkillID,
			Nonce: "00000000000000000000000000000000", Timestamp: now + 2}))
		if f.a.counter(mechUDP, "challenge_unknown") != 1 {
			t.Fatal("a wrong nonce was not refused")
		}
		time.Sleep(1100 * time.Millisecond) // acknowledgements: one a second per agent and status
		now += 1100
		f.handle(other.text(t, record.SkillMessage{Type: record.MsgChallengeResponse, AgentID: j.agentID, SkillID: fs.SkillID,
			Nonce: ch.Nonce, Timestamp: now + 2}))
		if ack := ackFor(t, f.sn, j.agentID); ack.Ack != record.AckUnauthorized {
			t.Fatalf("ack %s", ack.Ack)
		}
		if _, foreign, _ := f.a.lan.Discover(context.Background(), store.Filter{Capability: "hr-read"}); len(foreign) != 0 {
			t.Fatal("registered before the challenge was answered")
		}

		f.handle(j.text(t, record.SkillMessage{Type: record.MsgChallengeResponse, AgentID: j.agentID, SkillID: fs.SkillID,
			Nonce: ch.Nonce, Timestamp: now + 3}))
		if ack := ackFor(t, f.sn, j.agentID); ack.Ack != record.AckSuccess {
			t.Fatalf("ack %s: %s", ack.Ack, ack.Message)
		}
		_, foreign, _ := f.a.lan.Discover(context.Background(), store.Filter{Capability: "hr-read"})
		if len(foreign) != 1 || foreign[0].AgentID != record.ExternalAgentID(ForeignNamespace, j.agentID) {
			t.Fatalf("%+v", foreign)
		}

		// Heartbeats signed with the proven key are accepted; a forged one
		// is not.
		before := f.a.counter(mechUDP, "foreign")
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgSkillHeartbeat, AgentID: j.agentID, SkillID: fs.SkillID, Status: record.StatusDegraded, Timestamp: now + 4}))
		if f.a.counter(mechUDP, "foreign") != before+1 {
			t.Fatal("heartbeat with the proven key not accepted")
		}
		bad := f.a.counter(mechUDP, "bad_signature")
		f.handle(other.text(t, record.SkillMessage{Type: record.MsgSkillHeartbeat, AgentID: j.agentID, SkillID: fs.SkillID, Status: record.StatusHealthy, Timestamp: now + 5}))
		if f.a.counter(mechUDP, "bad_signature") != bad+1 {
			t.Fatal("heartbeat with another key accepted")
		}

		// JOIN_SCENE: the response names the scene, its group and members.
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgJoinScene, AgentID: j.agentID, SkillID: fs.SkillID, SceneID: "auth", Timestamp: now + 6}))
		js := nextMsg(t, f.sn, "JOIN_SCENE_RESPONSE:"+j.agentID+";")
		if js.Ack != record.AckSuccess || js.SceneID != "auth" || js.GroupID != "group-auth" ||
			!slices.Contains(js.Members, record.SceneMember{AgentID: j.agentID, SkillID: fs.SkillID, Endpoint: fs.Endpoint}) {
			t.Fatalf("%+v", js)
		}
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgJoinScene, AgentID: j.agentID, SkillID: "skill-none", SceneID: "auth", Timestamp: now + 7}))
		if js := nextMsg(t, f.sn, "JOIN_SCENE_RESPONSE:"+j.agentID+";"); js.Ack != record.AckNotFound || len(js.Members) != 0 {
			t.Fatalf("%+v", js)
		}

		// SKILL_UNREGISTER is acknowledged; an unknown skill's is NOT_FOUND.
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgSkillUnregister, AgentID: j.agentID, SkillID: fs.SkillID, Reason: record.ReasonShutdown, Timestamp: now + 8}))
		if ua := nextMsg(t, f.sn, "SKILL_UNREGISTER_ACK:"+j.agentID+";"); ua.Ack != record.AckSuccess || ua.SkillID != fs.SkillID {
			t.Fatalf("%+v", ua)
		}
		if _, foreign, _ := f.a.lan.Discover(context.Background(), store.Filter{Capability: "hr-read"}); len(foreign) != 0 {
			t.Fatal("still listed after its unregistration")
		}
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgSkillUnregister, AgentID: j.agentID, SkillID: "skill-none", Reason: record.ReasonShutdown, Timestamp: now + 9}))
		if ua := nextMsg(t, f.sn, "SKILL_UNREGISTER_ACK:"+j.agentID+";"); ua.Ack != record.AckNotFound {
			t.Fatalf("%+v", ua)
		}

		// Without a trust store the first proven key stays bound to the id.
		time.Sleep(1100 * time.Millisecond)
		now += 1100
		f.handle(other.register(t, fs, now+10, true))
		if ack := ackFor(t, f.sn, j.agentID); ack.Ack != record.AckUnauthorized {
			t.Fatalf("ack %s", ack.Ack)
		}
	})
}

// With a certificate trust store (§10.2) the chain must lead to its root:
// a skill certificate issued by `agentd ca` passes the challenge, a
// self-signed one is refused before any challenge.
func TestSeed001ChallengeWithTrustStore(t *testing.T) {
	dir := t.TempDir()
	bubble(t, func(t *testing.T) {
		// The CA in the bubble's clock (it starts in 2000).
		ca, err := trust.InitCA(dir, trust.CAOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := trust.LoadStore(ca.StoreConfig())
		if err != nil {
			t.Fatal(err)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "skill-hr"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := x509.ParseCertificateRequest(csrDER)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _, err := ca.Issue(csr, trust.IssueOptions{SkillID: "skill-hr"})
		if err != nil {
			t.Fatal(err)
		}
		j := &javaSkill{agentID: "agent-042", key: key, chain: []string{base64.StdEncoding.EncodeToString(leaf.Raw), base64.StdEncoding.EncodeToString(ca.Sub.Raw)}}
		ver, err := trust.NewVerifier(trust.Config{Policy: trust.PolicyCA, Chain: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := newLoop(t, func(*Config) {})
		f.a.lan.d.Verifier = ver
		fs := skill("skill-hr", record.SkillEnterprise, nil, "hr-read")
		now := time.Now().UnixMilli()

		self := selfSignedSkill(t, "agent-043")
		f.handle(self.register(t, fs, now, true))
		if ack := ackFor(t, f.sn, self.agentID); ack.Ack != record.AckUnauthorized {
			t.Fatalf("ack %s", ack.Ack)
		}

		f.handle(j.register(t, fs, now, true))
		if f.a.counter(mechUDP, "bad_certificate") != 1 {
			t.Fatalf("the self-signed certificate passed (%v refused)", f.a.counter(mechUDP, "bad_certificate"))
		}
		ch := nextMsg(t, f.sn, "CHALLENGE:"+j.agentID+";")
		f.handle(j.text(t, record.SkillMessage{Type: record.MsgChallengeResponse, AgentID: j.agentID, SkillID: fs.SkillID, Nonce: ch.Nonce, Timestamp: now + 1}))
		if ack := ackFor(t, f.sn, j.agentID); ack.Ack != record.AckSuccess {
			t.Fatalf("ack %s: %s", ack.Ack, ack.Message)
		}
	})
}
