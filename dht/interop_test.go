package dht

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestJSInterop proves the wire contract with an independent libp2p
// implementation: js-libp2p (pinned in interop/package-lock.json) joins
// through an agentd DHT server speaking /agentd/kad/1.0.0, finds an agentd
// provider of a skill key with GET_PROVIDERS on the CID of docs/protocol.md,
// then fetches and verifies the provider's record over /agentd/record/1.0.0
// (framing, nonce, challenge bytes and both ECDSA signatures, computed in
// JavaScript from the spec alone).
//
// Opt-in, because it installs npm packages:
//
//	AGENTD_JS_INTEROP=1 go test -run TestJSInterop -v ./dht/
func TestJSInterop(t *testing.T) {
	if os.Getenv("AGENTD_JS_INTEROP") == "" {
		t.Skip("opt-in: set AGENTD_JS_INTEROP=1 (needs node and npm, installs js-libp2p from the npm registry)")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s is not installed", tool)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "find.mjs", "polyfill.mjs"} {
		b, err := os.ReadFile(filepath.Join("interop", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}

	mk := func(hosted Hosted) (host.Host, *DHT) {
		id := mustIdentity(t)
		h, err := p2p.New(p2p.Config{Key: id.PeerKey, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		d, err := New(h, testConfig(), newVerifier(t), hosted, metrics.New(false), newTestLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return h, d
	}
	srvHost, srv := mk(nil)
	provID := mustIdentity(t)
	hosted := newFakeHosted()
	provHost, err := p2p.New(p2p.Config{Key: provID.PeerKey, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, DisableMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provHost.Close() })
	prov, err := New(provHost, testConfig(), newVerifier(t), hosted, nil, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	if err := prov.Bootstrap(ctx, []peer.AddrInfo{{ID: srvHost.ID(), Addrs: srvHost.Addrs()}}); err != nil {
		t.Fatal(err)
	}
	sa := signedAgent(t, provID, 1, skillSpec{"skill-org-feishu": {"org-data-read"}})
	hosted.set([]*record.SignedAgent{sa}, provID)
	prov.SetProvided([]*record.SignedAgent{sa})
	eventually(t, 20*time.Second, "the server to hold the provider record", func() bool {
		fs, err := srv.Find(ctx, "skill-org-feishu", "org-data-read", 1)
		return err == nil && len(fs) == 1
	})

	key := record.SkillKey("skill-org-feishu", "org-data-read")
	srvAddr := srvHost.Addrs()[0].String() + "/p2p/" + srvHost.ID().String()
	cmd := exec.CommandContext(ctx, "node", "find.mjs", srvAddr, key.CID().String(), provHost.ID().String())
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node find.mjs: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res struct {
		Providers []string `json:"providers"`
		Record    *struct {
			AgentID     string `json:"agent_id"`
			PeerID      string `json:"peer_id"`
			Signer      string `json:"signer"`
			SignatureOK bool   `json:"signature_ok"`
			ChallengeOK bool   `json:"challenge_ok"`
		} `json:"record"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("js output: %v\n%s", err, out)
	}
	t.Logf("js-libp2p: providers %v, record %+v", res.Providers, res.Record)
	if res.Error != nil {
		t.Fatalf("js-libp2p failed: %s", *res.Error)
	}
	if !slices.Contains(res.Providers, provHost.ID().String()) {
		t.Fatalf("js-libp2p did not find agentd's provider record: %v", res.Providers)
	}
	r := res.Record
	if r == nil || r.AgentID != provID.AgentID || r.PeerID != provHost.ID().String() || r.Signer != SignerAgent || !r.SignatureOK || !r.ChallengeOK {
		t.Fatalf("js-libp2p record fetch: %+v", r)
	}
}
