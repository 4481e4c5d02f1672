package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

var exampleSpec = filepath.Join("..", "..", "examples", "agentspec.yaml")

func TestRecordSignVerify(t *testing.T) {
	dir := t.TempDir()
	var id keygenResult
	if err := json.Unmarshal([]byte(mustRun(t, "--data-dir", dir, "keygen", "--json").stdout), &id); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, "record", "validate", exampleSpec); !strings.HasPrefix(r.stdout, "OK: ") {
		t.Errorf("validate: %s", r.stdout)
	}

	before := time.Now()
	r := mustRun(t, "--data-dir", dir, "record", "sign", exampleSpec)
	sa, _, err := record.ParseAnnounce([]byte(r.stdout))
	if err != nil {
		t.Fatalf("sign output is not an Announce: %v\n%s", err, r.stdout)
	}
	if err := sa.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	a := sa.Agent
	if a.AgentID != id.AgentID || a.PeerID != id.PeerID || a.TTLSeconds != 3600 ||
		a.Seq < uint64(before.UnixMilli()) || a.Issued().Before(before.Add(-time.Second)) {
		t.Errorf("signed agent identity fields: %+v", a)
	}
	if !a.Offers("", "product.search") || !a.Offers("", "product.compare") {
		t.Errorf("signed agent lacks the example's capabilities: %v", a.AllCapabilities())
	}

	// --out, then verify the file.
	out := filepath.Join(t.TempDir(), "announce.json")
	r = mustRun(t, "record", "sign", "--data-dir", dir, "--out", out, "--ttl", "10m", exampleSpec)
	if !strings.Contains(r.stderr, out) {
		t.Errorf("sign --out says %q", r.stderr)
	}
	r = mustRun(t, "record", "verify", out)
	for _, want := range []string{"OK: ", id.AgentID, id.PeerID, "fingerprint: " + id.Fingerprint} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := mustRun(t, "record", "validate", out); !strings.Contains(r.stdout, "Announce of agent "+id.AgentID) {
		t.Errorf("validate of an Announce: %s", r.stdout)
	}

	// Standard input.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, string(data), "record", "verify", "-"); r.code != 0 || !strings.Contains(r.stdout, "<stdin>") {
		t.Errorf("verify -: exit %d %s %s", r.code, r.stdout, r.stderr)
	}

	// Re-signing an Announce works (the content is kept, seq moves on).
	r = mustRun(t, "--data-dir", dir, "record", "sign", out)
	sa2, _, err := record.ParseAnnounce([]byte(r.stdout))
	if err != nil || sa2.Agent.AgentID != id.AgentID || sa2.Agent.Seq < sa.Agent.Seq {
		t.Errorf("re-sign: %v %+v", err, sa2)
	}
}

func TestRecordVerifyFailures(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "--data-dir", dir, "keygen")
	ann := mustRun(t, "--data-dir", dir, "record", "sign", exampleSpec).stdout

	// Tamper with a signed field.
	var m map[string]any
	if err := json.Unmarshal([]byte(ann), &m); err != nil {
		t.Fatal(err)
	}
	m["agent"].(map[string]any)["description"] = "something else"
	tampered, _ := json.Marshal(m)
	if r := runCLI(t, string(tampered), "record", "verify", "-"); r.code != exitFailed || !strings.Contains(r.stderr, "verification failed: "+record.ErrBadSignature.Error()) {
		t.Errorf("tampered: exit %d, stderr %s", r.code, r.stderr)
	}

	// Signatures removed.
	delete(m, "peer_signature")
	m["agent"].(map[string]any)["description"] = "Searches and compares products in the catalog"
	unsigned, _ := json.Marshal(m)
	if r := runCLI(t, string(unsigned), "record", "verify", "-"); r.code != exitFailed || !strings.Contains(r.stderr, "peer_signature is missing") {
		t.Errorf("no peer signature: exit %d, stderr %s", r.code, r.stderr)
	}

	// Expired and not yet valid records, signed properly.
	id, err := trust.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	signAt := func(at time.Time) string {
		data, err := os.ReadFile(exampleSpec)
		if err != nil {
			t.Fatal(err)
		}
		a, err := record.LoadAgentFile(exampleSpec, data)
		if err != nil {
			t.Fatal(err)
		}
		a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), uint64(at.UnixMilli()), at, time.Hour)
		sa, err := id.Sign(a)
		if err != nil {
			t.Fatal(err)
		}
		return string(sa.MarshalAnnounce())
	}
	if r := runCLI(t, signAt(time.Now().Add(-2*time.Hour)), "record", "verify", "-"); r.code != exitFailed || !strings.Contains(r.stderr, "expired at") {
		t.Errorf("expired: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := runCLI(t, signAt(time.Now().Add(time.Hour)), "record", "verify", "-"); r.code != exitFailed || !strings.Contains(r.stderr, "in the future") {
		t.Errorf("future: exit %d, stderr %s", r.code, r.stderr)
	}

	// An unsigned agent is not an Announce.
	if r := runCLI(t, "", "record", "verify", exampleSpec); r.code != exitFailed || !strings.Contains(r.stderr, "not an Announce") {
		t.Errorf("verify of a spec: exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestRecordValidateFailures(t *testing.T) {
	dir := t.TempDir()
	spec, err := os.ReadFile(exampleSpec)
	if err != nil {
		t.Fatal(err)
	}
	bad := writeFile(t, dir, "bad.yaml", strings.Replace(string(spec), `version: "1.2.0"`, `version: "one"`, 1))
	r := runCLI(t, "", "record", "validate", bad)
	if r.code != exitFailed || !strings.Contains(r.stderr, bad+":") || !strings.Contains(r.stderr, "version") {
		t.Errorf("bad spec: exit %d, stderr %s", r.code, r.stderr)
	}
	agent := writeFile(t, dir, "agent.json", `{"agent_name":"x","capabilities":{},"transport":{"type":"http","endpoint":"http://127.0.0.1:1"},"tags":["ok", ""]}`)
	r = runCLI(t, "", "record", "validate", agent)
	if r.code != exitFailed || !strings.Contains(r.stderr, "tags[1]") {
		t.Errorf("bad agent JSON: exit %d, stderr %s", r.code, r.stderr)
	}
	ann := writeFile(t, dir, "ann.json", `{"protocol_version":"v1.0","agent":{"agent_id":"nope","capabilities":{}}}`)
	r = runCLI(t, "", "record", "validate", ann)
	if r.code != exitFailed || !strings.Contains(r.stderr, "agent_id") {
		t.Errorf("bad announce: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "record", "validate", filepath.Join(dir, "missing.yaml")); r.code != exitFailed || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %s", r.code, r.stderr)
	}
	big := writeFile(t, dir, "big.yaml", "# "+strings.Repeat("x", record.MaxAgentFileBytes)+"\n")
	if r := runCLI(t, "", "record", "validate", big); r.code != exitFailed || !strings.Contains(r.stderr, "limit") {
		t.Errorf("big file: exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestRecordSignNeedsIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	r := runCLI(t, "", "--data-dir", dir, "record", "sign", exampleSpec)
	if r.code != exitFailed || !strings.Contains(r.stderr, "agentd keygen") {
		t.Errorf("exit %d, stderr %s", r.code, r.stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sign created the data directory: %v", err)
	}
	if r := runCLI(t, "", "--data-dir", dir, "record", "sign", "--ttl", "1ms", exampleSpec); r.code != exitUsage {
		t.Errorf("--ttl 1ms: exit %d", r.code)
	}
}
